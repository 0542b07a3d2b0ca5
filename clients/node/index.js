// The ksidecar Node client: Subscriber (Consumer.Subscribe) and Publisher (Producer.Produce).
'use strict';
const { Subscriber, Message } = require('./lib/subscriber');
const { Publisher } = require('./lib/publisher');
const errors = require('./lib/errors');
const { protoDir, services } = require('./lib/connect');
const json = require('./lib/json');

module.exports = {
  Subscriber,
  Message,
  Publisher,
  protoDir,
  services,
  parseJson: json.parse,
  stringifyJson: json.stringify,
  ...errors,
};
delete module.exports.fromGrpc;
delete module.exports.codeName;
delete module.exports.tidy;
