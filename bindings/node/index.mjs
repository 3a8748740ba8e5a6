// ESM entry: the same module as index.js.
import redlockc from './index.js';

export const {
  Client, Lock, ReadWriteLock, FairLock, Semaphore, PermitExpirableSemaphore, MultiLock,
  version, strerror, registerMetrics, STATUS, RedlockcError, NotAcquiredError,
  InvalidArgumentError, OutOfMemoryError, ConnectionError, TimeoutError, NotOwnerError,
  LockLostError, NoQuorumError, ServerError, ProtocolError, ClosedError, AuthError, CanceledError,
} = redlockc;
export default redlockc;
