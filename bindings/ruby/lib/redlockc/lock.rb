# frozen_string_literal: true

module Redlockc
  # A distributed lock with the verbs of Ruby's Mutex (#lock, #try_lock,
  # #unlock, #synchronize, #locked?, #owned?) and Monitor's reentrancy.
  #
  # Owners: each Lock object is one explicit owner id on the server, so it
  # does not matter which OS thread a call runs on. Threads and fibers of this
  # process that share one Lock object take turns through a local monitor
  # (held per Fiber, like Mutex since Ruby 3.0); the fiber that holds it may
  # lock again (reentrant, one level per #unlock). Two Lock objects of one
  # name exclude each other through Redis, as two processes do.
  #
  # Times are seconds (Float), as for sleep and Mutex#sleep.
  class Lock
    attr_reader :name, :owner, :client

    @owners = 0
    @owners_mu = Mutex.new
    # Explicit owner ids: unique in this process, never 0 (0 = "the thread").
    def self.next_owner = @owners_mu.synchronize { @owners += 1 }

    def self.finalizer(box)
      proc { (h = box[0]) && (box[0] = nil; Native.plain(:rlc_lock_free, h)) }
    end

    def initialize(client, name)
      @client = client
      @name = name
      @owner = Lock.next_owner
      @box = [client.new_lock_handle(name, @owner)] # freed by #close or the finalizer
      @mu = Mutex.new              # guards everything below
      @cv = ConditionVariable.new
      @holder = nil                # the Fiber holding it through this object
      @depth = 0
      @hold_serial = 0             # which hold a lost notice is about
      @lost_serial = 0
      @cancels = 0                 # #cancel calls: ends the local waits begun before
      @calls = 0                   # C calls in flight: #close waits for them
      @closed = false
      ObjectSpace.define_finalizer(self, self.class.finalizer(@box))
    end

    # Waits (forever) until held; returns self. lease: nil lets the watchdog
    # renew it until #unlock, a number is a fixed lease in seconds.
    def lock(lease: nil)
      try_lock(timeout: nil, lease: lease)
      self
    end

    # true when held, false when the timeout (seconds; 0 tries once, nil
    # waits forever) ran out.
    def try_lock(timeout: 0, lease: nil)
      deadline = timeout && now + timeout
      return false unless enter_local(deadline)

      held = false
      begin
        wait = deadline ? [((deadline - now) * 1000).ceil, 0].max : -1
        held = native(:rlc_lock_acquire, wait, lease ? (lease * 1000).ceil : 0) == 0
      ensure
        leave_local unless held
      end
      @mu.synchronize { @hold_serial += 1 if @depth == 1 } if held
      held
    end

    # Releases one level. Raises NotOwnerError when this fiber does not hold
    # it, LockLostError when it expired or was taken meanwhile. On an I/O
    # error the level is kept, so #unlock can be tried again.
    def unlock
      @mu.synchronize do
        unless @holder == Fiber.current
          raise Redlockc.error_for(NotOwnerError::STATUS, "lock '#{@name}' is not held by this fiber")
        end
      end
      begin
        native(:rlc_lock_release)
      rescue LockLostError, NotOwnerError, ClosedError
        leave_local(all: true)
        raise
      end
      leave_local
      self
    end

    # Holds the lock while the block runs. Raises NotAcquiredError when the
    # timeout (nil: forever) runs out; the block's own exception wins over a
    # failed release, else a LockLostError from the release tells that the
    # block was not protected to its end.
    def synchronize(timeout: nil, lease: nil)
      unless try_lock(timeout: timeout, lease: lease)
        raise Redlockc.error_for(NotAcquiredError::STATUS, "lock '#{@name}' is busy: the #{timeout} s timeout ran out")
      end
      begin
        result = yield self
      rescue Exception # rubocop:disable Lint/RescueException -- re-raised
        begin
          unlock
        rescue Error
          nil
        end
        raise
      end
      unlock
      result
    end

    # Held by anyone (on a quorum).
    def locked? = out_query(:rlc_lock_is_locked) { |p| Native.int32(p) == 1 }

    # Held by this fiber through this object now: false once the hold's
    # validity has run out (a fixed lease that ended, a watchdog hold not
    # renewed in time), then without asking Redis; else asks Redis.
    def owned?
      @mu.synchronize { @holder == Fiber.current } &&
        out_query(:rlc_lock_is_held) { |p| Native.int32(p) == 1 }
    end

    # This owner's levels on the server: 0 when not held, and once the hold's
    # validity has run out (then without asking Redis).
    def hold_count = out_query(:rlc_lock_hold_count) { |p| Native.int64(p) }

    # Seconds the key still lives: nil if no lock, Float::INFINITY if no expiry.
    def ttl
      ms = out_query(:rlc_lock_ttl_ms) { |p| Native.int64(p) }
      { -2 => nil, -1 => Float::INFINITY }.fetch(ms) { ms / 1000.0 }
    end

    # Seconds this owner's hold is certainly still held, at this call: the
    # lease, less the time since the acquire, renewal or extend a quorum
    # confirmed, less the drift allowance (rlc_lock_validity_ms). 0.0 when not
    # held, lost, or run out. A healthy watchdog hold stays above about 2/3 of
    # watchdog_timeout_ms (it is renewed every third). No I/O.
    def validity = out_query(:rlc_lock_validity_ms) { |p| Native.int64(p) / 1000.0 }

    # The fencing token of the current hold, with the client option
    # fencing: true (InvalidArgumentError without it: no hold takes a token).
    # NotOwnerError when not held, LockLostError once its validity has run
    # out. No I/O.
    def fencing_token = out_query(:rlc_lock_fencing_token) { |p| Native.uint64(p) }

    # lease seconds: a fixed lease from now; nil: back to the watchdog.
    def extend_lease(lease = nil)
      native(:rlc_lock_extend, lease ? (lease * 1000).ceil : 0)
      self
    end

    # Ends the waits of other threads and fibers on this object: a #lock,
    # #try_lock or #synchronize waiting in Redis (rlc_lock_cancel) or for the
    # local monitor raises CanceledError and keeps nothing. A wait that starts
    # after the call is not affected. Any thread; no I/O.
    def cancel
      @mu.synchronize do
        @cancels += 1
        @cv.broadcast
      end
      native(:rlc_lock_cancel)
      self
    end

    # Deletes the lock whoever holds it, and wakes waiters.
    def force_unlock
      native(:rlc_lock_force_release)
      self
    end

    # True when this object holds the lock but its validity has run out: the
    # watchdog could not renew it, or a fixed lease ended. No I/O.
    def lost?
      held = @mu.synchronize { @depth.positive? }
      held && validity.zero?
    rescue ClosedError
      false
    end

    # Calls block(lock, LockLostError) once per lost hold, on the client's
    # polling thread (Redlockc.lost_poll_interval). Polling, because the C
    # callback runs on the library's callback thread, and a Fiddle::Closure
    # called from a thread Ruby did not create is not safe. A watched Lock
    # stays referenced until #close.
    def on_lost(&block)
      @client.watch(self, block)
      self
    end

    # For the client's poller: a LockLostError once per lost hold, else nil.
    def take_lost
      serial = @mu.synchronize { @hold_serial if @depth.positive? && @lost_serial != @hold_serial }
      return nil unless serial && validity.zero?

      @mu.synchronize { @lost_serial = serial }
      Redlockc.error_for(LockLostError::STATUS, "lock '#{@name}' was lost: its validity ran out")
    rescue ClosedError
      nil
    end

    # Frees the C handle once no call is in flight. A hold is not released on
    # the server: it stops being renewed and expires.
    def close
      @client.unwatch(self)
      @mu.synchronize do
        @closed = true
        free_handle if @calls.zero?
      end
      nil
    end

    def closed? = @closed

    private

    def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

    # The local monitor: true once this fiber holds it (again), false at the
    # deadline (nil: none); CanceledError after a #cancel during the wait.
    def enter_local(deadline)
      @mu.synchronize do
        if @holder == Fiber.current
          @depth += 1
          return true
        end
        cancels = @cancels
        while @holder
          left = deadline && deadline - now
          return false if left && left <= 0

          @cv.wait(@mu, left)
          local_canceled if @cancels != cancels
        end
        raise Redlockc.error_for(ClosedError::STATUS, "lock '#{@name}' is closed") if @closed

        @holder = Fiber.current
        @depth = 1
        true
      end
    end

    # Under @mu. The signal of a #leave_local may have woken this waiter:
    # pass it on before leaving.
    def local_canceled
      @cv.signal unless @holder
      raise Redlockc.error_for(CanceledError::STATUS, "lock '#{@name}': the wait was cancelled")
    end

    def leave_local(all: false)
      @mu.synchronize do
        @depth = all ? 0 : @depth - 1
        if @depth <= 0
          @depth = 0
          @holder = nil
          @cv.signal
        end
      end
    end

    # Calls rlc_<name>(handle, ...) with the handle kept alive meanwhile.
    def native(name, *args)
      handle = @mu.synchronize do
        raise Redlockc.error_for(ClosedError::STATUS, "lock '#{@name}' is closed") if @closed

        @calls += 1
        @box[0]
      end
      begin
        Native.call(name, handle, *args)
      ensure
        @mu.synchronize do
          @calls -= 1
          free_handle if @closed && @calls.zero?
        end
      end
    end

    def out_query(name)
      out = Native.out8
      native(name, out)
      yield out
    end

    def free_handle
      h = @box[0]
      @box[0] = nil
      Native.plain(:rlc_lock_free, h) if h
    end
  end
end
