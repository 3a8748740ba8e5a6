'use strict';
// One Error class per libredlockc status, so callers can `instanceof` the
// failure they handle. err.status is the C status number, err.code its C
// name as a string (the Node convention: 'RLC_E_LOST' like 'ECONNREFUSED').

class RedlockcError extends Error {
  constructor(status, message, options) {
    super(message, options);
    this.name = this.constructor.name;
    this.status = status;
    this.code = STATUS_NAMES[status] || `RLC_${status}`;
  }
}

const STATUS = {
  OK: 0, NOT_ACQUIRED: 1, E_INVAL: -1, E_NOMEM: -2, E_CONNECT: -3, E_TIMEOUT: -4,
  E_NOT_OWNER: -5, E_LOST: -6, E_NO_QUORUM: -7, E_SERVER: -8, E_PROTOCOL: -9,
  E_CLOSED: -10, E_AUTH: -11, E_CANCELED: -12,
};
const STATUS_NAMES = Object.fromEntries(Object.entries(STATUS).map(([k, v]) => [v, `RLC_${k}`]));

// Thrown by withLock()/Client#acquire() when the wait ran out (status 1 is
// not an error in C: Lock#acquire() returns false instead).
class NotAcquiredError extends RedlockcError {}
class InvalidArgumentError extends RedlockcError {}
class OutOfMemoryError extends RedlockcError {}
class ConnectionError extends RedlockcError {}
class TimeoutError extends RedlockcError {}
class NotOwnerError extends RedlockcError {}
class LockLostError extends RedlockcError {}
class NoQuorumError extends RedlockcError {}
class ServerError extends RedlockcError {}
class ProtocolError extends RedlockcError {}
class ClosedError extends RedlockcError {}
class AuthError extends RedlockcError {}
// An acquire ended by rlc_engine_cancel (an aborted signal rejects with
// signal.reason instead: this one is seen only if the engine cancels alone).
class CanceledError extends RedlockcError {}

const CLASS_OF = {
  [STATUS.NOT_ACQUIRED]: NotAcquiredError,
  [STATUS.E_INVAL]: InvalidArgumentError,
  [STATUS.E_NOMEM]: OutOfMemoryError,
  [STATUS.E_CONNECT]: ConnectionError,
  [STATUS.E_TIMEOUT]: TimeoutError,
  [STATUS.E_NOT_OWNER]: NotOwnerError,
  [STATUS.E_LOST]: LockLostError,
  [STATUS.E_NO_QUORUM]: NoQuorumError,
  [STATUS.E_SERVER]: ServerError,
  [STATUS.E_PROTOCOL]: ProtocolError,
  [STATUS.E_CLOSED]: ClosedError,
  [STATUS.E_AUTH]: AuthError,
  [STATUS.E_CANCELED]: CanceledError,
};

// "lock lost: lock 'orders' was lost ..." from rlc_strerror + rlc_errmsg.
function errorFor(status, detail, strerror) {
  const Cls = CLASS_OF[status] || RedlockcError;
  const phrase = strerror(status);
  return new Cls(status, detail ? `${phrase}: ${detail}` : phrase);
}

module.exports = {
  STATUS, RedlockcError, NotAcquiredError, InvalidArgumentError, OutOfMemoryError,
  ConnectionError, TimeoutError, NotOwnerError, LockLostError, NoQuorumError, ServerError,
  ProtocolError, ClosedError, AuthError, CanceledError, errorFor,
};
