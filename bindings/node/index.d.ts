// Type declarations for redlockc (index.js; index.d.mts re-exports them for
// the ES module entry). Times are milliseconds, like setTimeout.
/// <reference types="node" />
import { EventEmitter } from 'node:events';

/** Options of a Client: every option of redlockc.h (c/src/engine/options.c
 * is the one list; test/options.test.js checks this one against it), in
 * camelCase as Node programs write them or in snake_case as redlockc.h names
 * them. 0/1 options also take booleans. */
export interface ClientOptions {
  /** Lease of a watchdog hold, renewed every third of it (default 30000). */
  watchdogTimeoutMs?: number;
  /** Per-call deadline, one node (default 1000). */
  ioTimeoutMs?: number;
  /** Per-node deadline of a Redlock call (default 50). */
  nodeTimeoutMs?: number;
  /** Added to a call that must (re)connect, name lookup included (default 1000). */
  connectTimeoutMs?: number;
  /** Random delay before a Redlock retry after a split vote (default 50). */
  retryJitterMs?: number;
  /** Clock drift allowance as a fraction of the lease (default 0.01). */
  driftFactor?: number;
  /** Accepted (1 to 64), no effect since 1.2: every kind runs on one command connection per node. */
  poolSize?: number;
  /** Prepended to every lock name (default ''). */
  keyPrefix?: string;
  /** A restarted node counts toward no quorum until the longest lease has passed (default: on for >= 3 nodes). */
  restartGuard?: boolean | 0 | 1;
  /** A watchdog hold is known lost within a round trip of its key being deleted, overwritten or expired (default on). */
  lossPush?: boolean | 0 | 1;
  /** Each new hold takes a fencing token (fencingToken()) from the counter
   * redisson_lock_token:{name}, one key per lock name that stays on the
   * server (it keeps tokens growing); off (default), fencingToken() throws
   * and a released lock leaves no key. Same name in both spellings. */
  fencing?: boolean | 0 | 1;
  /** An acquire counts on a node only once WAIT says this many replicas have it (default 0, off). */
  syncReplicas?: number;
  /** How long that WAIT may take (default 1000). */
  syncTimeoutMs?: number;
  /** rediss://: CA file replacing the default CAs. */
  tlsCaFile?: string;
  /** rediss://: a directory of CA certificates. */
  tlsCaDir?: string;
  /** rediss://: client certificate, if the server asks for one. */
  tlsCertFile?: string;
  /** rediss://: the client certificate's key (needs tlsCertFile). */
  tlsKeyFile?: string;
  /** rediss://: the name to check (default: the URI's host). */
  tlsServerName?: string;
  /** rediss://: 0/false accepts any certificate (tests only; default on). */
  tlsVerify?: boolean | 0 | 1;
  /** redis-sentinel://: AUTH user for the sentinels. */
  sentinelUser?: string;
  /** redis-sentinel://: AUTH password for the sentinels. */
  sentinelPassword?: string;

  watchdog_timeout_ms?: number;
  io_timeout_ms?: number;
  node_timeout_ms?: number;
  connect_timeout_ms?: number;
  retry_jitter_ms?: number;
  drift_factor?: number;
  /** Accepted (1 to 64), no effect since 1.2 (as poolSize). */
  pool_size?: number;
  key_prefix?: string;
  restart_guard?: boolean | 0 | 1;
  loss_push?: boolean | 0 | 1;
  sync_replicas?: number;
  sync_timeout_ms?: number;
  tls_ca_file?: string;
  tls_ca_dir?: string;
  tls_cert_file?: string;
  tls_key_file?: string;
  tls_server_name?: string;
  tls_verify?: boolean | 0 | 1;
  sentinel_user?: string;
  sentinel_password?: string;
}

export interface AcquireOptions {
  /** ms to wait while busy: 0 tries once, default (or Infinity, < 0) forever. */
  wait?: number;
  /** 0 (default): the watchdog renews it until release; > 0: a fixed lease in ms. */
  lease?: number;
  /** Aborting it ends the wait, rejecting with signal.reason; nothing stays held. */
  signal?: AbortSignal;
}

export interface LeaseOptions {
  lease?: number;
}

export interface WaitLeaseOptions {
  wait?: number;
  lease?: number;
}

export type LogLevel = 'error' | 'warn' | 'info' | 'debug';

export interface LogLine {
  level: LogLevel;
  message: string;
}

export interface WaitBucket {
  /** Upper bound in ms (Infinity last). */
  le: number;
  /** Waits that took at most le ms (cumulative). */
  count: number;
}

/** client.metrics(): the library's counters, no I/O. */
export interface Metrics {
  acquires: number;
  busy: number;
  waits: number;
  renewals: number;
  lost: number;
  reconnects: number;
  scriptReloads: number;
  waitMsSum: number;
  waitBuckets: WaitBucket[];
  [counter: string]: number | WaitBucket[];
}

export declare class Client extends EventEmitter {
  /** nodes: "redis://host:port", a comma-separated list (>= 2: Redlock),
   * rediss://, redis-cluster:// or redis-sentinel:// URIs. */
  constructor(nodes: string, options?: ClientOptions | string);
  /** The UUID in the hash fields of this client's Lock holds; null once closed. */
  readonly uuid: string | null;
  /** A new Lock (a new owner) for name. No I/O. */
  lock(name: string): Lock;
  /** A held Lock, or throws NotAcquiredError when the wait runs out. */
  acquire(name: string, options?: AcquireOptions): Promise<Lock>;
  /** Runs body(signal, lock) holding name, then releases it. */
  withLock<T>(name: string, body: (signal: AbortSignal, lock: Lock) => T | Promise<T>,
    options?: AcquireOptions): Promise<T>;
  /** Writes value at key only if token is at least the stored fence: true written, false refused. */
  fencedSet(key: string, value: string | Buffer, token: bigint | number): Promise<boolean>;
  metrics(): Metrics;
  close(): Promise<void>;

  rwlock(name: string): ReadWriteLock;
  fairLock(name: string, options?: FairLockOptions): FairLock;
  semaphore(name: string, permits?: number): Promise<Semaphore>;
  permitSemaphore(name: string, permits?: number): Promise<PermitExpirableSemaphore>;
  multiLock(names: string[]): MultiLock;

  on(event: 'log', listener: (line: LogLine) => void): this;
  once(event: 'log', listener: (line: LogLine) => void): this;
  off(event: 'log', listener: (line: LogLine) => void): this;
  addListener(event: 'log', listener: (line: LogLine) => void): this;
  removeListener(event: 'log', listener: (line: LogLine) => void): this;
  emit(event: 'log', line: LogLine): boolean;
}

export declare class Lock extends EventEmitter {
  /** Use client.lock(name). */
  constructor(client: Client, name: string);
  readonly name: string;
  /** This object's owner id (the "<uuid>:<owner>" hash field). */
  readonly owner: number;
  readonly client: Client;
  /** true held, false when the wait ran out. */
  acquire(options?: AcquireOptions): Promise<boolean>;
  tryAcquire(options?: LeaseOptions): Promise<boolean>;
  release(): Promise<void>;
  /** lease > 0: a fixed lease from now; 0: back to the watchdog. */
  extend(lease?: number): Promise<void>;
  forceRelease(): Promise<void>;
  isLocked(): Promise<boolean>;
  isHeld(): Promise<boolean>;
  holdCount(): Promise<number>;
  /** The key's PTTL in ms: -2 no lock, -1 no expiry. */
  ttl(): Promise<number>;
  /** ms the hold is certainly still held (0 when not held). No I/O. */
  validity(): number;
  /** The current hold's fencing token; throws InvalidArgumentError without the client option fencing. No I/O. */
  fencingToken(): bigint;
  /** Aborted (reason: a LockLostError) when the hold is lost; null when not held. */
  readonly signal: AbortSignal | null;
  close(): void;
  [Symbol.asyncDispose](): Promise<void>;

  on(event: 'lost', listener: (err: LockLostError) => void): this;
  once(event: 'lost', listener: (err: LockLostError) => void): this;
  off(event: 'lost', listener: (err: LockLostError) => void): this;
  addListener(event: 'lost', listener: (err: LockLostError) => void): this;
  removeListener(event: 'lost', listener: (err: LockLostError) => void): this;
  emit(event: 'lost', err: LockLostError): boolean;
}

/** A family acquire's options. */
export interface FamilyWaitOptions extends WaitLeaseOptions {
  /** Aborting it ends the wait, rejecting with signal.reason; nothing stays held. */
  signal?: AbortSignal;
}

/** Shared by the lock family's handles. */
declare class FamilyHandle {
  readonly client: Client;
  readonly name: string;
  close(): void;
}

export declare class ReadWriteLockSide {
  acquire(options?: FamilyWaitOptions): Promise<boolean>;
  tryAcquire(options?: LeaseOptions): Promise<boolean>;
  release(): Promise<void>;
  holdCount(): number;
  validity(): number;
}

export declare class ReadWriteLock extends FamilyHandle {
  constructor(client: Client, name: string);
  readonly owner: number;
  readLock(): ReadWriteLockSide;
  writeLock(): ReadWriteLockSide;
  mode(): Promise<'free' | 'read' | 'write'>;
}

export interface FairLockOptions {
  /** ms a dead waiter keeps its place (default 5000). */
  threadWait?: number;
}

export declare class FairLock extends FamilyHandle {
  constructor(client: Client, name: string, options?: FairLockOptions);
  readonly owner: number;
  acquire(options?: FamilyWaitOptions): Promise<boolean>;
  tryAcquire(options?: LeaseOptions): Promise<boolean>;
  release(): Promise<void>;
  holdCount(): number;
  validity(): number;
}

export interface PermitOptions {
  permits?: number;
  wait?: number;
  /** Aborting it ends the wait, rejecting with signal.reason; no permit is taken. */
  signal?: AbortSignal;
}

export declare class Semaphore extends FamilyHandle {
  constructor(client: Client, name: string);
  trySetPermits(permits: number): Promise<boolean>;
  available(): Promise<number>;
  acquire(options?: PermitOptions): Promise<boolean>;
  tryAcquire(options?: { permits?: number }): Promise<boolean>;
  release(permits?: number): Promise<void>;
}

export declare class PermitExpirableSemaphore extends FamilyHandle {
  constructor(client: Client, name: string);
  trySetPermits(permits: number): Promise<boolean>;
  available(): Promise<number>;
  /** A permit id (32 hex digits), or null when the wait ran out. lease (ms) is required. */
  acquire(options: PermitOptions & { lease: number }): Promise<string | null>;
  release(id: string): Promise<void>;
}

export declare class MultiLock extends FamilyHandle {
  constructor(client: Client, names: string[]);
  readonly owner: number;
  /** Sorted and de-duplicated. */
  readonly names: string[];
  readonly size: number;
  acquire(options?: FamilyWaitOptions): Promise<boolean>;
  tryAcquire(options?: LeaseOptions): Promise<boolean>;
  release(): Promise<void>;
}

export declare const STATUS: {
  readonly OK: 0; readonly NOT_ACQUIRED: 1; readonly E_INVAL: -1; readonly E_NOMEM: -2;
  readonly E_CONNECT: -3; readonly E_TIMEOUT: -4; readonly E_NOT_OWNER: -5; readonly E_LOST: -6;
  readonly E_NO_QUORUM: -7; readonly E_SERVER: -8; readonly E_PROTOCOL: -9; readonly E_CLOSED: -10;
  readonly E_AUTH: -11; readonly E_CANCELED: -12;
};

export declare class RedlockcError extends Error {
  constructor(status: number, message: string, options?: ErrorOptions);
  /** The C status number. */
  readonly status: number;
  /** Its C name: 'RLC_E_LOST'. */
  readonly code: string;
}
export declare class NotAcquiredError extends RedlockcError {}
export declare class InvalidArgumentError extends RedlockcError {}
export declare class OutOfMemoryError extends RedlockcError {}
export declare class ConnectionError extends RedlockcError {}
export declare class TimeoutError extends RedlockcError {}
export declare class NotOwnerError extends RedlockcError {}
export declare class LockLostError extends RedlockcError {
  /** On a 'lost' event: the status that lost it. */
  reason?: number;
}
export declare class NoQuorumError extends RedlockcError {}
export declare class ServerError extends RedlockcError {}
export declare class ProtocolError extends RedlockcError {}
export declare class ClosedError extends RedlockcError {}
export declare class AuthError extends RedlockcError {}
export declare class CanceledError extends RedlockcError {}

export interface RegisterMetricsOptions {
  /** A prom-client Registry (default: prom-client's global register). */
  registry?: unknown;
  /** The value of the `client` label: a name you choose, stable across restarts (default 'default'). */
  label?: string;
  /** The prom-client module, if this package cannot require it. */
  promClient?: unknown;
}

/** Registers the client's Prometheus metrics (redlock_acquire_wait_seconds,
 * redlock_locks_held, redlock_waiters, redlock_lock_lost_total,
 * redlock_renewals_total) on a prom-client Registry under a client label.
 * Returns a function that removes them again. prom-client is an optional peer. */
export declare function registerMetrics(client: Client, options?: RegisterMetricsOptions): () => void;

/** The library's version (rlc_version()). */
export declare const version: string;
export declare function strerror(status: number): string;
