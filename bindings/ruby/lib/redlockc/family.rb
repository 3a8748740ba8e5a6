# frozen_string_literal: true

module Redlockc
  # The lock family (REDLOCKC_1.1, docs/FAMILY.md): ReadWriteLock, FairLock,
  # Semaphore, PermitExpirableSemaphore, MultiLock, made by the client:
  #
  #   rw = client.rwlock("cfg")
  #   rw.read_lock.synchronize { ... }   # many readers
  #   rw.write_lock.synchronize { ... }  # one writer
  #   client.fair_lock("jobs").synchronize { ... }
  #   sem = client.semaphore("pool", 3)  # sets 3 permits if unset
  #   sem.synchronize { ... }            # one permit
  #   client.multi_lock(%w[a b]).synchronize { ... }
  #
  # Verbs of Mutex (#lock, #try_lock(timeout:), #unlock, #synchronize), and
  # #cancel, which another thread calls to end a wait (CanceledError);
  # times in seconds. Each owner-bound object is one explicit owner (reentrant
  # through that object); unlike Lock it has no per-fiber monitor, so give
  # each thread or fiber its own object. Failures raise the Error classes of
  # their status; a timeout that runs out returns false (nil for a permit).
  module Family
    P = Native::P
    I = Native::I
    I64 = Native::I64
    U64 = Native::U64
    S = Native::S
    V = Native::V

    SIGNATURES = {
      rlc_rwlock_new: [[P, S, U64, P], I], rlc_rwlock_free: [[P], V],
      rlc_rwlock_read_acquire: [[P, I64, I64], I], rlc_rwlock_read_release: [[P], I],
      rlc_rwlock_write_acquire: [[P, I64, I64], I], rlc_rwlock_write_release: [[P], I],
      rlc_rwlock_mode: [[P, P], I], rlc_rwlock_hold_count: [[P, I, P], I],
      rlc_rwlock_validity_ms: [[P, I, P], I],
      rlc_fairlock_new: [[P, S, U64, I64, P], I], rlc_fairlock_free: [[P], V],
      rlc_fairlock_acquire: [[P, I64, I64], I], rlc_fairlock_release: [[P], I],
      rlc_fairlock_hold_count: [[P, P], I], rlc_fairlock_validity_ms: [[P, P], I],
      rlc_semaphore_new: [[P, S, P], I], rlc_semaphore_free: [[P], V],
      rlc_semaphore_try_set_permits: [[P, I64, P], I], rlc_semaphore_available: [[P, P], I],
      rlc_semaphore_acquire: [[P, I64, I64], I], rlc_semaphore_release: [[P, I64], I],
      rlc_psemaphore_new: [[P, S, P], I], rlc_psemaphore_free: [[P], V],
      rlc_psemaphore_try_set_permits: [[P, I64, P], I], rlc_psemaphore_available: [[P, P], I],
      rlc_psemaphore_acquire: [[P, I64, I64, I64, P], I], rlc_psemaphore_release: [[P, S], I],
      rlc_multilock_new: [[P, P, I, U64, P], I], rlc_multilock_free: [[P], V],
      rlc_multilock_acquire: [[P, I64, I64], I], rlc_multilock_release: [[P], I],
      rlc_multilock_size: [[P, P], I]
    }.freeze

    # Since REDLOCKC_1.2; each looked up on its own, so a 1.1 library still
    # loads (then #cancel raises KeyError).
    SIGNATURES_1_2 = {
      rlc_rwlock_cancel: [[P], I], rlc_fairlock_cancel: [[P], I], rlc_semaphore_cancel: [[P], I],
      rlc_psemaphore_cancel: [[P], I], rlc_multilock_cancel: [[P], I]
    }.freeze

    FUNCTIONS = begin
      handle = Fiddle.dlopen(Native::LIBRARY)
      functions = SIGNATURES.to_h { |name, (args, ret)| [name, Fiddle::Function.new(handle[name.to_s], args, ret)] }
      SIGNATURES_1_2.each do |name, (args, ret)|
        functions[name] = Fiddle::Function.new(handle[name.to_s], args, ret)
      rescue Fiddle::DLError
        nil
      end
      functions
    rescue Fiddle::DLError
      {} # a libredlockc older than 1.1: the family raises KeyError
    end.freeze

    module_function

    def call(name, *args)
      rc = FUNCTIONS.fetch(name).call(*args)
      raise Redlockc.error_for(rc, Native.plain(:rlc_errmsg).to_s) if rc.negative?

      rc
    end

    def ms(seconds) = seconds ? (seconds * 1000).ceil : 0
    def wait_ms(timeout) = timeout ? [(timeout * 1000).ceil, 0].max : -1

    def count(n, what = "permits")
      return n if n.is_a?(Integer) && n.positive?

      raise InvalidArgumentError.new("#{what} must be a positive Integer, got #{n.inspect}",
                                     status: InvalidArgumentError::STATUS)
    end

    def closed_error(name) = ClosedError.new("'#{name}' is closed", status: ClosedError::STATUS)
  end

  # What every family object shares: its C handle, freed by #close or by
  # the garbage collector.
  class FamilyHandle
    attr_reader :name, :client

    def self.finalizer(box, free)
      proc { (h = box[0]) && (box[0] = nil; Family::FUNCTIONS[free].call(h)) }
    end

    def closed? = @box[0].nil?

    # Ends the acquires waiting on this object in other threads: each raises
    # CanceledError and keeps nothing (a fair waiter leaves the queue, a
    # semaphore's permits stay free). An acquire that starts after the call
    # is not affected. Any thread; no I/O.
    def cancel
      Family.call(@cancel, h)
      self
    end

    # Frees the handle. Holds are not released: they expire with their lease.
    def close
      h = @box[0]
      @box[0] = nil
      Family::FUNCTIONS[@free].call(h) if h
      nil
    end

    private

    # free: the C destructor, rlc_<kind>_free; its rlc_<kind>_cancel goes with it.
    def attach(client, name, free, handle)
      @client = client
      @name = name
      @free = free
      @cancel = :"#{free.to_s.delete_suffix('_free')}_cancel"
      @box = [handle]
      ObjectSpace.define_finalizer(self, self.class.finalizer(@box, free))
    end

    def h = @box[0] || raise(Family.closed_error(@name))

    def out_call(fn, *args)
      out = Native.out8
      Family.call(fn, h, *args, out)
      out
    end
  end

  # Mutex verbs over an acquire/release pair of C functions.
  module FamilyLockVerbs
    # Waits (forever) until held; returns self.
    def lock(lease: nil)
      try_lock(timeout: nil, lease: lease)
      self
    end

    # true when held, false when the timeout (seconds; 0 once, nil forever) ran out.
    def try_lock(timeout: 0, lease: nil)
      Family.call(acquire_fn, handle_for_call, Family.wait_ms(timeout), Family.ms(lease)).zero?
    end

    # Releases one level. NotOwnerError / LockLostError as for Lock.
    def unlock
      Family.call(release_fn, handle_for_call)
      self
    end

    def synchronize(timeout: nil, lease: nil)
      unless try_lock(timeout: timeout, lease: lease)
        raise NotAcquiredError.new("'#{name}' is busy: the #{timeout} s timeout ran out",
                                   status: NotAcquiredError::STATUS)
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
  end

  # Many readers or one writer (Redisson's RReadWriteLock). #read_lock and
  # #write_lock are its sides; the writer may also read; a waiting writer
  # holds back new readers.
  class ReadWriteLock < FamilyHandle
    # One side: the Mutex verbs, #hold_count and #validity (no I/O).
    class Side
      include FamilyLockVerbs
      attr_reader :rwlock

      def initialize(rwlock, write)
        @rwlock = rwlock
        @write = write
      end

      def name = @rwlock.name
      def write? = @write
      # Ends the waits on the read-write lock, of both sides (ReadWriteLock#cancel).
      def cancel = @rwlock.cancel && self
      def hold_count = Native.int64(@rwlock.send(:out_call, :rlc_rwlock_hold_count, @write ? 1 : 0))
      def validity = Native.int64(@rwlock.send(:out_call, :rlc_rwlock_validity_ms, @write ? 1 : 0)) / 1000.0

      private

      def acquire_fn = @write ? :rlc_rwlock_write_acquire : :rlc_rwlock_read_acquire
      def release_fn = @write ? :rlc_rwlock_write_release : :rlc_rwlock_read_release
      def handle_for_call = @rwlock.send(:h)
    end

    MODES = [:free, :read, :write].freeze
    attr_reader :owner, :read_lock, :write_lock

    def initialize(client, name)
      @owner = Lock.next_owner
      attach(client, name, :rlc_rwlock_free,
             client.new_family_handle(:rlc_rwlock_new, name, @owner))
      @read_lock = Side.new(self, false)
      @write_lock = Side.new(self, true)
    end

    # :free, :read or :write (the server's mode field).
    def mode = MODES.fetch(Native.int32(out_call(:rlc_rwlock_mode)))
  end

  # First come, first served (Redisson's RFairLock). One node only.
  class FairLock < FamilyHandle
    include FamilyLockVerbs
    attr_reader :owner

    # thread_wait: seconds (default 5) after which a silent waiter may be dropped (2x).
    def initialize(client, name, thread_wait: nil)
      @owner = Lock.next_owner
      attach(client, name, :rlc_fairlock_free,
             client.new_family_handle(:rlc_fairlock_new, name, @owner, Family.ms(thread_wait)))
    end

    def hold_count = Native.int64(out_call(:rlc_fairlock_hold_count))
    def validity = Native.int64(out_call(:rlc_fairlock_validity_ms)) / 1000.0

    private

    def acquire_fn = :rlc_fairlock_acquire
    def release_fn = :rlc_fairlock_release
    def handle_for_call = h
  end

  # RLock names held together, all or none (sorted, de-duplicated).
  class MultiLock < FamilyHandle
    include FamilyLockVerbs
    attr_reader :owner, :names

    def initialize(client, names)
      names = Array(names).map { |n| String(n) }
      @owner = Lock.next_owner
      ptrs = names.map { |n| Fiddle::Pointer[n + "\0"] } # kept alive until the call returns
      vec = ptrs.map(&:to_i).pack("J*")
      attach(client, names.join(","), :rlc_multilock_free,
             client.new_family_handle(:rlc_multilock_new, Fiddle::Pointer[vec], names.size, @owner))
      ptrs.clear
      @names = names.uniq.sort_by(&:b)
    end

    def size = Native.int32(out_call(:rlc_multilock_size))

    private

    def acquire_fn = :rlc_multilock_acquire
    def release_fn = :rlc_multilock_release
    def handle_for_call = h
  end

  # A count of free permits (Redisson's RSemaphore), not bound to an owner.
  class Semaphore < FamilyHandle
    def initialize(client, name, prefix = :rlc_semaphore)
      @p = prefix
      attach(client, name, :"#{prefix}_free", client.new_family_handle(:"#{prefix}_new", name))
    end

    # Sets the count only if the semaphore has none; true if it did.
    def try_set_permits(permits) = Native.int32(out_call(:"#{@p}_try_set_permits", Family.count(permits))) != 0

    def available_permits = Native.int64(out_call(:"#{@p}_available"))

    # true when the permits were taken, false when the timeout ran out.
    def try_acquire(permits = 1, timeout: 0)
      Family.call(:rlc_semaphore_acquire, h, Family.count(permits), Family.wait_ms(timeout)).zero?
    end

    def acquire(permits = 1)
      try_acquire(permits, timeout: nil)
      self
    end

    def release(permits = 1)
      Family.call(:rlc_semaphore_release, h, Family.count(permits))
      self
    end

    # Holds permits while the block runs.
    def synchronize(permits = 1, timeout: nil)
      unless try_acquire(permits, timeout: timeout)
        raise NotAcquiredError.new("semaphore '#{name}': no permit within #{timeout} s",
                                   status: NotAcquiredError::STATUS)
      end
      begin
        yield self
      ensure
        release(permits)
      end
    end
  end

  # Permits with a lease (Redisson's RPermitExpirableSemaphore): #try_acquire
  # returns a permit id (32 hex digits) or nil; #release(id) raises
  # LockLostError if the lease ran out first.
  class PermitExpirableSemaphore < Semaphore
    def initialize(client, name)
      super(client, name, :rlc_psemaphore)
    end

    # lease: seconds, required (expirable permits have no watchdog).
    def try_acquire(permits = 1, timeout: 0, lease:)
      buf = Fiddle::Pointer.malloc(RLC_PERMIT_ID_LEN + 1, Fiddle::RUBY_FREE)
      rc = Family.call(:rlc_psemaphore_acquire, h, Family.count(permits), Family.wait_ms(timeout),
                       Family.ms(lease), buf)
      rc.zero? ? buf.to_s : nil
    end

    def acquire(permits = 1, lease:) = try_acquire(permits, timeout: nil, lease: lease)

    def release(id)
      Family.call(:rlc_psemaphore_release, h, String(id))
      self
    end

    def synchronize(permits = 1, timeout: nil, lease:)
      id = try_acquire(permits, timeout: timeout, lease: lease) or
        raise NotAcquiredError.new("semaphore '#{name}': no permit within #{timeout} s",
                                   status: NotAcquiredError::STATUS)
      begin
        yield id
      ensure
        release(id)
      end
    end
  end

  RLC_PERMIT_ID_LEN = 32

  class Client
    def rwlock(name) = ReadWriteLock.new(self, name)
    def fair_lock(name, thread_wait: nil) = FairLock.new(self, name, thread_wait: thread_wait)
    def multi_lock(names) = MultiLock.new(self, names)

    # With permits, the count is set if the semaphore has none (one round trip).
    def semaphore(name, permits = nil)
      Semaphore.new(self, name).tap { |s| s.try_set_permits(permits) if permits }
    end

    def permit_semaphore(name, permits = nil)
      PermitExpirableSemaphore.new(self, name).tap { |s| s.try_set_permits(permits) if permits }
    end

    # A C family handle: fn(client, *args, out), under @mu so that #close
    # cannot free the client meanwhile (no network I/O: brief).
    def new_family_handle(fn, *args)
      @mu.synchronize do
        raise ClosedError.new("client is closed", status: ClosedError::STATUS) if closed?

        out = Native.out8
        Family.call(fn, @box[0], *args, out)
        Native.pointer(out)
      end
    end
  end
end
