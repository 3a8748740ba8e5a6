# frozen_string_literal: true

module Redlockc
  # A connection set to one Redis node (single-instance locks) or N >= 2
  # independent masters (Redlock). Thread-safe; connections are made lazily.
  #
  #   client = Redlockc::Client.new("redis://127.0.0.1:6379", watchdog_timeout_ms: 30_000)
  #   client.lock("orders").synchronize { ... }
  class Client
    # nodes: "redis://[user:pass@]host:port[/db]" or a comma-separated list.
    # options: the names of redlockc.h (watchdog_timeout_ms:, io_timeout_ms:, ...);
    # true/false for the 0/1 ones (fencing: true, loss_push: false).
    def initialize(nodes = "redis://127.0.0.1:6379", **options)
      opts = options.map { |k, v| "#{k}=#{Client.option_text(v)}" }.join(";")
      out = Native.out8
      Native.call(:rlc_client_new, out, nodes, opts.empty? ? nil : opts)
      @box = [Native.pointer(out)]
      @mu = Mutex.new
      @watched = {}   # Lock => callback, polled by @watcher
      @watcher = nil
      @log_callback = nil # on_log's block, called by @log_thread
      @log_thread = nil
      @log_mu = Mutex.new # with @log_cv: wakes @log_thread's sleep to stop it
      @log_cv = ConditionVariable.new
      ObjectSpace.define_finalizer(self, self.class.finalizer(@box))
      keep_logs
    end

    # An option's value as the C option string writes it: true/false as 1/0.
    def self.option_text(value)
      case value
      when true then 1
      when false then 0
      else value
      end
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

    LOG_LEVELS = { 1 => :error, 2 => :warn, 3 => :info, 4 => :debug }.freeze

    # The client's log lines since the last call, oldest first, taken on the
    # calling thread (libredlockc 1.2, rlc_client_next_log): [[level,
    # message], ...], level :warn (lost holds) or :info (reconnects, script
    # reloads). At most 64 wait; past that the newest are dropped and the
    # last line kept ends "(and N more log lines, dropped)". No network I/O.
    def logs
      @mu.synchronize do
        raise Redlockc.error_for(ClosedError::STATUS, "the client is closed") if closed?

        take_logs
      end
    end

    # Calls the block with (level, message) for each log line, from a thread
    # of the client's own that takes them (#logs) every
    # Redlockc.log_poll_interval seconds; a later on_log replaces the block,
    # on_log without a block stops that thread. #close takes the last lines
    # and stops it. Lines taken by the thread are not returned by #logs.
    def on_log(&block)
      stop_log_thread unless block
      @mu.synchronize do
        raise Redlockc.error_for(ClosedError::STATUS, "the client is closed") if closed?

        @log_callback = block
        @log_thread ||= Thread.new { poll_logs } if block
      end
      self
    end

    # Stops the watchdog and closes connections. Held locks are not released
    # on the server (they expire); their Lock objects then raise ClosedError.
    def close
      stop_log_thread # its last look at the lines, while the client lives
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

    # From Client.new: the library keeps the lines for #logs (libredlockc
    # 1.2; an older one has no polled log, and #logs raises KeyError).
    def keep_logs
      return unless Native::FUNCTIONS.key?(:rlc_client_keep_log)

      Native.call(:rlc_client_keep_log, @box[0], 3) # RLC_LOG_INFO
    end

    # Under @mu, the client open: the lines waiting, oldest first.
    def take_logs
      buf = Fiddle::Pointer.malloc(512, Fiddle::RUBY_FREE)
      level = Native.out8
      lines = []
      256.times do # bounded: at most 64 wait, a few may come meanwhile
        n = Native.plain(:rlc_client_next_log, @box[0], level, buf, 512)
        break if n.zero?

        text = buf.to_s.force_encoding(Encoding::UTF_8)
        lines << [LOG_LEVELS.fetch(Native.int32(level), :debug), text]
      end
      lines
    end

    # @log_thread: takes and hands over the lines until stop_log_thread
    # marks it (a mark of its own: on_log may start the next one meanwhile).
    # A stop seen before a look gets that look, so #close loses no line.
    def poll_logs
      me = Thread.current
      loop do
        stop = @log_mu.synchronize { me.thread_variable_get(:redlockc_stop) }
        lines = @mu.synchronize { closed? ? [] : take_logs }
        lines.each do |level, message|
          @log_callback&.call(level, message)
        rescue StandardError => e
          warn "redlockc: on_log block raised #{e.class}: #{e.message}"
        end
        break if stop

        @log_mu.synchronize do
          @log_cv.wait(@log_mu, Redlockc.log_poll_interval) unless me.thread_variable_get(:redlockc_stop)
        end
      end
    end

    def stop_log_thread
      thread = @log_thread
      return unless thread

      @log_mu.synchronize do
        thread.thread_variable_set(:redlockc_stop, true)
        @log_cv.broadcast
      end
      @mu.synchronize { @log_thread = nil if @log_thread.equal?(thread) }
      thread.join unless thread == Thread.current # from the block: it ends once the block returns
    end

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
    # Seconds between two looks at a client's log lines (Client#on_log).
    attr_accessor :log_poll_interval
  end
  self.lost_poll_interval = 0.1
  self.log_poll_interval = 0.15
end
