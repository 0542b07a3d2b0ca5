// index.d.ts type-checks against a typical use (tsc --strict, no emit).
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const path = require('path');
const { execFileSync } = require('child_process');

test('index.d.ts compiles with a typical use under tsc --strict', () => {
  const tsc = path.join(__dirname, '..', 'node_modules', 'typescript', 'bin', 'tsc');
  const out = (() => {
    try {
      return execFileSync(process.execPath, [tsc, '--noEmit', '--strict', '--target', 'es2020', '--module', 'commonjs',
        '--types', 'node', path.join(__dirname, 'types', 'example.ts')], { encoding: 'utf8' });
    } catch (e) {
      return `${e.stdout}${e.stderr}`;
    }
  })();
  assert.strictEqual(out.trim(), '');
});
