# frozen_string_literal: true

module Redlockc
  # A connection set to one Redis node (single-instance locks) or N >= 2
  # independent masters (Redlock). Thread-safe; connections are made lazily.
  #
  #   client = Redlockc::Client.new("redis://127.0.0.1:6379", watchdog_timeout_ms: 30_000)
  #   client.lock("orders").synchronize { ... }
  class Client
    # nodes: "redis://[user:pass@]host:port[/db]" or a comma-separated list.
    # options: the names of redlockc.h (watchdog_timeout_ms:, io_timeout_ms:, ...).
    def initialize(nodes = "redis://127.0.0.1:6379", **options)
      opts = options.map { |k, v| "#{k}=#{v}" }.join(";")
      out = Native.out8
      Native.call(:rlc_client_new, out, nodes, opts.empty? ? nil : opts)
      @box = [Native.pointer(out)]
      @mu = Mutex.new
      @watched = {}   # Lock => callback, polled by @watcher
      @watcher = nil
      ObjectSpace.define_finalizer(self, self.class.finalizer(@box))
    end

    # Frees the C client when the Client is collected without #close.
    def self.finalizer(box)
      proc { (h = box[0]) && (box[0] = nil; Native.plain(:rlc_client_free, h)) }
    end

    # A new Lock (a new owner) for name. No network I/O.
    def lock(name) = Lock.new(self, name)

    def uuid = @mu.synchronize { closed? ? nil : Native.plain(:rlc_client_uuid, @box[0]).to_s }

    def closed? = @box[0].nil?

    # The client's counters (libredlockc 1.1), no network I/O: a Hash with
    # :acquires, :busy, :waits, :renewals, :lost, :reconnects,
    # :script_reloads, :wait_seconds_sum and :wait_buckets, [[le_seconds,
    # count], ...] cumulative (the last le is Float::INFINITY).
    def metrics
      @mu.synchronize do
        raise Redlockc.error_for(ClosedError::STATUS, "the client is closed") if closed?

        buf = Fiddle::Pointer.malloc(8 * 64, Fiddle::RUBY_FREE)
        n = [Native.call(:rlc_client_metrics, @box[0], buf, 64), 64].min
        values = buf[0, 8 * n].unpack("Q#{n}")
        out = { wait_buckets: [] }
        total = 0
        values.each_with_index do |value, i|
          name = Native.plain(:rlc_metric_name, i).to_s
          if name == "wait_bucket"
            le = Native.plain(:rlc_metric_bucket_ms, out[:wait_buckets].size)
            total += value
            out[:wait_buckets] << [le == (2**63) - 1 ? Float::INFINITY : le / 1000.0, total]
          elsif name == "wait_ms_sum"
            out[:wait_seconds_sum] = value / 1000.0
          else
            out[name.to_sym] = value
          end
        end
        out
      end
    end

    # Stops the watchdog and closes connections. Held locks are not released
    # on the server (they expire); their Lock objects then raise ClosedError.
    def close
      h = @mu.synchronize do
        @watched.clear
        @box[0].tap { @box[0] = nil }
      end
      @watcher&.join
      Native.plain(:rlc_client_free, h) if h
      nil
    end

    # Writes value at key only if token (Lock#fencing_token, >= 1) is at least
    # the fence stored with it in "redlockc_fence:{key}". true: written;
    # false: refused, a later holder's larger token is stored. The client must
    # have one node: the resource's Redis. #close waits for a call in progress.
    def fenced_set(key, value, token)
      key = String(key)
      value = String(value).b
      raise InvalidArgumentError.new("token must be 1 .. 2**64-1", status: InvalidArgumentError::STATUS) unless
        token.is_a?(Integer) && token >= 1 && token < 2**64
      @mu.synchronize do
        raise ClosedError.new("client is closed", status: ClosedError::STATUS) if closed?

        out = Native.out8
        Native.call(:rlc_fenced_set, @box[0], key, value, value.bytesize, token, out)
        Native.int32(out) != 0
      end
    end

    # A C lock handle for Lock#initialize. Under @mu, so #close cannot free
    # the client while rlc_lock_new uses it (no network I/O: brief).
    def new_lock_handle(name, owner)
      @mu.synchronize do
        raise Redlockc.error_for(ClosedError::STATUS, "the client is closed") if closed?

        out = Native.out8
        Native.call(:rlc_lock_new, @box[0], name, owner, out)
        Native.pointer(out)
      end
    end

    # Lost notification by polling (see Lock#on_lost): one thread per client,
    # started on first use, reading each watched lock's validity (no I/O).
    def watch(lock, callback)
      @mu.synchronize do
        raise Redlockc.error_for(ClosedError::STATUS, "the client is closed") if closed?

        @watched[lock] = callback
        @watcher ||= Thread.new { poll_lost }
      end
    end

    def unwatch(lock)
      @mu.synchronize { @watched.delete(lock) }
    end

    private

    def poll_lost
      until closed?
        @mu.synchronize { @watched.dup }.each do |lock, callback|
          err = lock.take_lost
          next unless err

          begin
            callback.call(lock, err)
          rescue StandardError => e
            warn "redlockc: on_lost callback raised #{e.class}: #{e.message}"
          end
        end
        sleep Redlockc.lost_poll_interval
      end
    end
  end

  class << self
    # Seconds between two looks at the watched locks' validity (Lock#on_lost).
    attr_accessor :lost_poll_interval
  end
  self.lost_poll_interval = 0.1
end
