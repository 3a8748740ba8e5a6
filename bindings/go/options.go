package redlockc

import (
	"crypto/tls"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Option configures a Client (New). Each sets one of the library's options
// (redlockc.h, rlc_client_new); the library checks the ranges and names the
// option at fault in an ErrInvalid.
type Option func(*config)

type config struct {
	names  []string // the library's option names, in order
	values []string
	raw    string // WithOptions
	tls    *tls.Config
	logger func(LogLevel, string)
	err    error
}

func (c *config) set(name, value string) {
	c.names = append(c.names, name)
	c.values = append(c.values, value)
}

// text sets a text option; ';' would end it early in the option string.
func (c *config) text(name, value string) {
	if strings.ContainsRune(value, ';') && c.err == nil {
		c.err = errorf(StatusInvalid, "new client", "option %s must not contain ';'", name)
		return
	}
	c.set(name, value)
}

// String is the options as the library reads them: "name=value;...".
func (c *config) String() string {
	parts := make([]string, 0, len(c.names)+1)
	for i, n := range c.names {
		parts = append(parts, n+"="+c.values[i])
	}
	if c.raw != "" {
		parts = append(parts, c.raw)
	}
	return strings.Join(parts, ";")
}

// ms is d in whole milliseconds, rounded up (so 1ns is 1 ms, not 0).
func ms(d time.Duration) int64 {
	if d <= 0 {
		return int64(d / time.Millisecond)
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func msOption(name string, d time.Duration) Option {
	return func(c *config) { c.set(name, strconv.FormatInt(ms(d), 10)) }
}

func boolText(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// WithWatchdogTimeout is the lease of watchdog holds, renewed every third of
// it (default 30 s; 10 ms to 24 h).
func WithWatchdogTimeout(d time.Duration) Option { return msOption("watchdog_timeout_ms", d) }

// WithIOTimeout bounds each call to one node (default 1 s).
func WithIOTimeout(d time.Duration) Option { return msOption("io_timeout_ms", d) }

// WithNodeTimeout bounds each node's answer in a Redlock round over N nodes
// (default 50 ms).
func WithNodeTimeout(d time.Duration) Option { return msOption("node_timeout_ms", d) }

// WithConnectTimeout bounds a connect, name lookup and TLS handshake
// included (default 1 s).
func WithConnectTimeout(d time.Duration) Option { return msOption("connect_timeout_ms", d) }

// WithRetryJitter is the most a Redlock retry waits at random after a split
// vote (default 50 ms; 0 to 60 s).
func WithRetryJitter(d time.Duration) Option { return msOption("retry_jitter_ms", d) }

// WithDriftFactor is the clock drift allowed for, as a fraction of the lease
// (default 0.01; 0 to 0.5).
func WithDriftFactor(f float64) Option {
	return func(c *config) { c.set("drift_factor", strconv.FormatFloat(f, 'f', -1, 64)) }
}

// WithPoolSize sets pool_size: accepted (1 to 64), no effect since 1.2.
// Every lock kind, ForceRelease and FencedSet pipeline on one command
// connection per node whatever it is.
func WithPoolSize(n int) Option {
	return func(c *config) { c.set("pool_size", strconv.Itoa(n)) }
}

// WithKeyPrefix is prepended to every lock name (default "").
func WithKeyPrefix(prefix string) Option {
	return func(c *config) { c.text("key_prefix", prefix) }
}

// WithRestartGuard turns the guard against a node restarted without
// persistence on or off (default: on for Redlock over N >= 3 nodes).
func WithRestartGuard(on bool) Option {
	return func(c *config) { c.set("restart_guard", boolText(on)) }
}

// WithLossPush turns loss push (a hold found gone as soon as its key is
// deleted or overwritten, not at the next renewal) on or off (default on).
func WithLossPush(on bool) Option {
	return func(c *config) { c.set("loss_push", boolText(on)) }
}

// WithFencing true gives each new hold a fencing token (Lock.FencingToken)
// from the counter redisson_lock_token:{name}, a key that stays on the
// server after the lock is released, one per lock name (it keeps the tokens
// growing). Off (default): FencingToken returns ErrInvalid, and a released
// lock leaves no key.
func WithFencing(on bool) Option {
	return func(c *config) { c.set("fencing", boolText(on)) }
}

// Format is how a lock is kept on the server.
type Format string

const (
	// FormatRedisson (default): Redisson's RLock hash, reentrant.
	FormatRedisson Format = "redisson"
	// FormatClassic: the string key redsync, node-redlock and redis-py's Lock
	// keep (SET NX PX of a random value), so they exclude each other on the
	// same names; not reentrant, no fencing tokens, no lock family.
	FormatClassic Format = "classic"
)

// WithFormat chooses how locks are kept (the option format).
func WithFormat(f Format) Option {
	return func(c *config) { c.text("format", string(f)) }
}

// WithSyncReplicas makes every write wait until n replicas of its node have
// it (Redis WAIT), for at most timeout (0: the default 1 s).
func WithSyncReplicas(n int, timeout time.Duration) Option {
	return func(c *config) {
		c.set("sync_replicas", strconv.Itoa(n))
		if timeout != 0 {
			c.set("sync_timeout_ms", strconv.FormatInt(ms(timeout), 10))
		}
	}
}

// WithTLSCAFile trusts the CA certificates of this PEM file alone for
// rediss:// nodes (default: the system's).
func WithTLSCAFile(path string) Option {
	return func(c *config) { c.text("tls_ca_file", path) }
}

// WithTLSCADir trusts the PEM certificates of this directory alone.
func WithTLSCADir(dir string) Option {
	return func(c *config) { c.text("tls_ca_dir", dir) }
}

// WithTLSClientCert presents a client certificate (PEM); keyFile "" when the
// key is in certFile.
func WithTLSClientCert(certFile, keyFile string) Option {
	return func(c *config) {
		c.text("tls_cert_file", certFile)
		if keyFile != "" {
			c.text("tls_key_file", keyFile)
		}
	}
}

// WithTLSServerName is the name the servers' certificates must carry (and
// the SNI), instead of each node's host.
func WithTLSServerName(name string) Option {
	return func(c *config) { c.text("tls_server_name", name) }
}

// WithTLSVerify false accepts any server certificate (tests only).
func WithTLSVerify(verify bool) Option {
	return func(c *config) { c.set("tls_verify", boolText(verify)) }
}

// WithTLSConfig is the crypto/tls configuration of the rediss:// nodes'
// connections, instead of the tls_* options (Lock values only: the lock
// family reads the file options). ServerName, when empty, is each node's
// host.
func WithTLSConfig(cfg *tls.Config) Option {
	return func(c *config) { c.tls = cfg }
}

// WithSentinelAuth is the AUTH of the sentinels of redis-sentinel:// nodes.
func WithSentinelAuth(user, password string) Option {
	return func(c *config) {
		if user != "" {
			c.text("sentinel_user", user)
		}
		c.text("sentinel_password", password)
	}
}

// WithOptions adds options in the library's own form, "name=value;..." (as
// in redlockc.h): the escape hatch for a name this package has no Option
// for.
func WithOptions(options string) Option {
	return func(c *config) { c.raw = strings.Trim(options, "; ") }
}

// WithLogger receives what the library logs (a node that refuses loss push,
// reconnecting to a node, a node that lost the scripts) and the driver's
// own connection failures. It runs on a goroutine of its own, one line at a
// time; lines that find 64 waiting are dropped.
func WithLogger(fn func(level LogLevel, message string)) Option {
	return func(c *config) { c.logger = fn }
}

func buildConfig(opts []Option) (*config, error) {
	c := &config{}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	return c, nil
}

// LogLevel is a log line's level (RLC_LOG_*).
type LogLevel int

const (
	LogError LogLevel = 1
	LogWarn  LogLevel = 2
	LogInfo  LogLevel = 3
	LogDebug LogLevel = 4
)

func (l LogLevel) String() string {
	switch l {
	case LogError:
		return "error"
	case LogWarn:
		return "warn"
	case LogInfo:
		return "info"
	case LogDebug:
		return "debug"
	}
	return fmt.Sprintf("level(%d)", int(l))
}
