// Copies the repository's proto/ksidecar into the package (run by npm's prepare step).
'use strict';
// The package loads its .proto files at run time with @grpc/proto-loader (nothing
// generated is committed). Inside the repository they sit at ../../proto; a packed or
// installed copy has no repository around it, so `npm install` (in clients/node) and
// `npm pack` run this first and ship proto/ inside the package. proto/ is ignored by git.
const fs = require('fs');
const path = require('path');

const src = path.join(__dirname, '..', '..', '..', 'proto', 'ksidecar');
const dst = path.join(__dirname, '..', 'proto', 'ksidecar');
if (!fs.existsSync(src)) {
  // Installed from a packed tarball: proto/ is already inside.
  if (!fs.existsSync(dst)) {
    console.error(`copy-proto: neither ${src} nor ${dst} exists`);
    process.exit(1);
  }
  process.exit(0);
}
fs.rmSync(dst, { recursive: true, force: true });
fs.cpSync(src, dst, { recursive: true });
console.log(`copy-proto: ${src} -> ${dst}`);
