# frozen_string_literal: true

# Behaviours of the Ruby binding against a real redis-server, which
# tests/runtimes/run.sh starts (tests/support) and names in RLC_TEST_REDIS.
require "minitest/autorun"
require "socket"
require "timeout"
require "uri"
require "redlockc"

class RedlockcTest < Minitest::Test
  def setup
    @uri = ENV["RLC_TEST_REDIS"] or flunk "RLC_TEST_REDIS is not set: run tests/runtimes/run.sh"
    @clients = []
    @locks = []
  end

  def teardown
    @locks.each(&:close)
    @clients.each(&:close)
  end

  def client(**options)
    Redlockc::Client.new(@uri, **options).tap { |c| @clients << c }
  end

  def lock(client, name)
    client.lock(name).tap { |l| @locks << l }
  end

  def unique(what)
    "ruby-#{what}-#{Process.pid}-#{Process.clock_gettime(Process::CLOCK_REALTIME, :nanosecond)}"
  end

  def test_two_lock_objects_exclude_each_other
    c = client
    name = unique("excl")
    a = lock(c, name)
    b = lock(c, name)
    assert a.try_lock, "a should get a free lock"
    refute b.try_lock, "b must not get a lock a holds"
    assert a.locked?
    assert a.owned?
    refute b.owned?
    a.unlock
    assert b.try_lock(timeout: 1), "b should get it after a unlocked"
    b.unlock
    refute a.locked?
  end

  def test_synchronize_is_reentrant_for_the_holding_fiber
    c = client
    l = lock(c, unique("re"))
    counts = l.synchronize { l.synchronize { l.hold_count } }
    assert_equal 2, counts, "hold count inside two nested synchronize"
    refute l.locked?, "free after both levels"
  end

  # Threads sharing one Lock take turns through its local monitor; threads
  # with Lock objects of their own take turns through Redis.
  def test_threads_sharing_and_not_sharing_a_lock_take_turns
    c = client
    name = unique("threads")
    shared = lock(c, name)
    counter = 0
    inside = 0
    overlaps = 0
    guard = Mutex.new # only for inside/overlaps bookkeeping
    threads = Array.new(8) do |i|
      l = i.even? ? shared : lock(c, name)
      Thread.new do
        10.times do
          l.synchronize(timeout: 30) do
            guard.synchronize { overlaps += 1 if (inside += 1) != 1 }
            v = counter
            sleep 0.0005 # widen the window a lost update needs
            counter = v + 1
            guard.synchronize { inside -= 1 }
          end
        end
      end
    end
    threads.each(&:join)
    assert_equal 80, counter, "expected 80 increments (8 threads x 10), saw #{counter}"
    assert_equal 0, overlaps, "overlapping critical sections"
  end

  def test_fibers_sharing_a_lock_are_different_holders
    c = client
    l = lock(c, unique("fibers"))
    l.lock
    other = Fiber.new { [l.try_lock, (l.unlock rescue $!)] }
    got, unlock_error = other.resume
    refute got, "another fiber must not enter while this one holds"
    assert_kind_of Redlockc::NotOwnerError, unlock_error
    l.unlock
    assert Fiber.new { l.try_lock.tap { l.unlock } }.resume, "free once this fiber unlocked"
  end

  def test_errors_are_classes_per_status_with_their_message
    c = client
    name = unique("notowner")
    l = lock(c, name)
    l.instance_variable_get(:@mu).synchronize { l.instance_variable_set(:@holder, Fiber.current) }
    err = assert_raises(Redlockc::NotOwnerError) { l.unlock }
    assert_equal(-5, err.status)
    assert_equal "RLC_E_NOT_OWNER", err.code
    assert_includes err.message, "'#{name}'"
    err = assert_raises(Redlockc::InvalidArgumentError) { Redlockc::Client.new(@uri, no_such_option: 1) }
    assert_includes err.message, "no_such_option"
  end

  # docs/RUNTIMES.md: every error reads rlc_strerror(status) + ": " + detail,
  # the ones the binding raises itself (before any C call) included.
  def test_every_error_has_the_strerror_prefix
    strerror = ->(status) { Redlockc::Native.plain(:rlc_strerror, status).to_s }
    c = client
    l = lock(c, unique("form"))
    err = assert_raises(Redlockc::NotOwnerError) { l.unlock }
    assert err.message.start_with?("#{strerror.call(-5)}: "), "NotOwnerError: #{err.message}"
    c2 = Redlockc::Client.new(@uri)
    c2.close
    err = assert_raises(Redlockc::ClosedError) { c2.lock("x") }
    assert_equal "#{strerror.call(-10)}: the client is closed", err.message
    l2 = lock(c, unique("closed"))
    l2.close
    err = assert_raises(Redlockc::ClosedError) { l2.try_lock }
    assert err.message.start_with?("#{strerror.call(-10)}: "), "ClosedError: #{err.message}"
    holder = lock(c, unique("busy"))
    other = lock(client, holder.name)
    assert holder.try_lock
    err = assert_raises(Redlockc::NotAcquiredError) { other.synchronize(timeout: 0.05) { flunk } }
    assert err.message.start_with?("#{strerror.call(1)}: "), "NotAcquiredError: #{err.message}"
    holder.unlock
  end

  def test_metrics_count_acquires_and_busy
    a = client
    b = client
    n = unique("metrics")
    mine = lock(a, n)
    other = lock(b, n)
    assert mine.try_lock
    refute other.try_lock
    mine.unlock
    assert_equal 1, a.metrics[:acquires]
    assert_equal 1, b.metrics[:busy]
    assert_equal Float::INFINITY, b.metrics[:wait_buckets].last[0]
    assert_equal 12, b.metrics[:wait_buckets].size
  end

  # rlc_errmsg() is per OS thread: each error carries its own call's message.
  def test_concurrent_failures_carry_their_own_message
    c = client
    names = Array.new(16) { |i| unique("msg#{i}") }
    errors = names.map do |n|
      l = lock(c, n)
      Thread.new { l.send(:native, :rlc_lock_release) rescue $! }
    end.map(&:value)
    errors.each_with_index do |e, i|
      assert_kind_of Redlockc::NotOwnerError, e
      assert_includes e.message, "'#{names[i]}'", "call #{i} got another call's message"
    end
  end

  def test_unreachable_server_is_a_connection_error_naming_the_address
    port = TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }
    c = Redlockc::Client.new("redis://127.0.0.1:#{port}", connect_timeout_ms: 500)
    @clients << c
    err = assert_raises(Redlockc::ConnectionError) { lock(c, unique("down")).try_lock }
    assert_includes err.message, "127.0.0.1:#{port}"
  end

  def test_synchronize_times_out_and_releases_after_an_exception
    c = client
    name = unique("sync")
    holder = lock(c, name)
    other = lock(c, name)
    holder.lock
    assert_raises(Redlockc::NotAcquiredError) { other.synchronize(timeout: 0.1) { flunk "entered" } }
    holder.unlock
    assert_raises(RuntimeError) { other.synchronize { raise "boom" } }
    refute other.locked?, "released after the block raised"
  end

  def test_lost_lock_is_noticed_by_polling
    c = client(watchdog_timeout_ms: 600)
    name = unique("lost")
    l = lock(c, name)
    notices = Queue.new
    l.on_lost { |lk, err| notices << [lk, err] }
    l.lock
    lock(c, name).force_unlock # the holder's renewal now fails
    lk, err = Timeout.timeout(10) { notices.pop }
    assert_same l, lk
    assert_kind_of Redlockc::LockLostError, err
    assert l.lost?
    assert_raises(Redlockc::LockLostError) { l.unlock }
    assert l.try_lock, "usable again after the loss was reported"
    l.unlock
  end

  # A fixed lease that runs out while a Lock of another client waits: the
  # waiter gets it, and the first Lock says lost from then on.
  def test_a_fixed_lease_that_runs_out_is_lost
    name = unique("ranout")
    l = lock(client(fencing: true), name)
    waiter = lock(client(fencing: true), name)
    notices = Queue.new
    l.on_lost { |lk, err| notices << [lk, err] }
    assert l.try_lock(lease: 0.7), "the free lock is taken for 0.7 s"
    token = l.fencing_token
    assert waiter.try_lock(timeout: 10), "the other client's waiter gets it once the lease ran out"
    lk, err = Timeout.timeout(5) { notices.pop }
    assert_same l, lk
    assert_kind_of Redlockc::LockLostError, err
    refute l.owned?, "owned? once the lease ran out"
    assert_equal 0, l.hold_count, "hold_count once the lease ran out"
    assert_equal 0.0, l.validity, "validity once the lease ran out"
    assert_raises(Redlockc::LockLostError) { l.fencing_token }
    assert_operator waiter.fencing_token, :>, token, "the waiter's token is larger"
    assert_raises(Redlockc::LockLostError) { l.unlock }
    assert waiter.owned?, "the waiter keeps it after the late unlock"
    # Five polls: a second notice for the same hold would come within them.
    again = begin
      Timeout.timeout(0.5) { notices.pop }
    rescue Timeout::Error
      nil
    end
    assert_nil again, "one notice per lost hold"
    waiter.unlock
  end

  # One command to the (first) test server, by hand: its reply line, or the
  # bulk string after it ("nil" for none).
  def redis(*args)
    uri = URI(@uri.split(",").first)
    TCPSocket.open(uri.host, uri.port) do |s|
      s.write("*#{args.size}\r\n" + args.map { |a| "$#{a.bytesize}\r\n#{a}\r\n" }.join)
      line = s.gets.to_s.chomp
      next line[1..] unless line.start_with?("$")

      n = line[1..].to_i
      n.negative? ? "nil" : s.read(n + 2)[0, n]
    end
  end

  # format: :classic (the string lock of redis-py's Lock, node-redlock and
  # redsync): the key holds "<client uuid>:<hex>", the same fiber's nested
  # try_lock raises InvalidArgumentError naming "not reentrant" and leaves
  # the hold as it was, and unlock leaves no key.
  def test_classic_format_is_a_string_key_not_reentrant_and_none_left
    c = client(format: :classic)
    name = unique("classic")
    l = lock(c, name)
    assert l.try_lock, "a free classic lock is taken"
    assert_equal "string", redis("TYPE", name)
    value = redis("GET", name)
    assert_match(/\A#{Regexp.escape(c.uuid)}:\h+\z/, value, "the value is <client uuid>:<hex>")
    err = assert_raises(Redlockc::InvalidArgumentError) { l.try_lock }
    assert_match(/not reentrant/, err.message)
    assert_equal value, redis("GET", name), "the hold stays as it was"
    assert_equal 1, l.hold_count
    l.unlock
    assert_equal "0", redis("EXISTS", name), "no key left after unlock"
    refute l.owned?
    assert client(format: "classic").lock(name).tap { |o| @locks << o }.try_lock, "the string form works too"
    err = assert_raises(Redlockc::InvalidArgumentError) { client(format: :classic, fencing: true) }
    assert_match(/format/, err.message, "fencing beside the classic format is refused naming format")
  end

  # SCRIPT FLUSH on each test server, by hand (RESP inline command): the
  # next script call finds its script gone, and the library logs it.
  def script_flush
    @uri.split(",").each do |u|
      uri = URI(u)
      TCPSocket.open(uri.host, uri.port) do |s|
        s.write("SCRIPT FLUSH\r\n")
        assert_equal "+OK", s.gets.to_s.chomp, "SCRIPT FLUSH on #{uri.host}:#{uri.port}"
      end
    end
  end

  # A cycle first: a script's first call on a connection is no reload.
  def flush_and_cycle(lock)
    lock.lock
    lock.unlock
    script_flush
    lock.lock
    lock.unlock
  end

  # Taken on the caller's thread: no library thread ever calls into Ruby.
  def test_logs_are_taken_on_the_callers_thread
    c = client
    l = lock(c, unique("logs"))
    flush_and_cycle(l)
    seen = []
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 5
    until seen.any? || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      seen.concat(c.logs)
      sleep 0.02
    end
    assert seen.any? { |level, msg| level == :info && msg.include?("had lost the scripts (NOSCRIPT)") },
           "a script reload line: #{seen.inspect}"
    assert_equal [], c.logs, "each line is taken once"
    c.close
    assert_raises(Redlockc::ClosedError) { c.logs }
  end

  # on_log: a thread of the client's own polls and calls the block; #close
  # stops it.
  def test_on_log_block_runs_on_the_clients_polling_thread_until_close
    c = client
    l = lock(c, unique("onlog"))
    lines = Queue.new
    c.on_log { |level, msg| lines << [level, msg, Thread.current] }
    flush_and_cycle(l)
    level, msg, thread = Timeout.timeout(5) { lines.pop }
    assert_equal :info, level
    assert_includes msg, "had lost the scripts (NOSCRIPT)"
    refute_same Thread.current, thread, "called on the client's thread"
    assert thread.alive?, "polling while the client is open"
    l.close
    c.close
    refute thread.alive?, "stopped by close"
  end

  def test_forked_child_gets_closed_and_can_make_a_new_client
    c = client
    name = unique("fork")
    l = lock(c, name)
    l.lock
    pid = fork do
      ok = begin
        l.send(:native, :rlc_lock_acquire, 0, 0)
        false
      rescue Redlockc::ClosedError
        true
      end
      fresh = Redlockc::Client.new(@uri)
      ok &&= !fresh.lock(name).try_lock # still the parent's
      exit!(ok ? 0 : 1)
    end
    _, status = Process.wait2(pid)
    assert status.success?, "child: expected ClosedError on the parent's client and a busy lock on its own"
    assert l.owned?, "the parent still holds it"
    l.unlock
  end

  def test_closed_client_and_lock_raise_closed_error
    c = client
    l = lock(c, unique("closed"))
    assert l.try_lock
    c.close
    assert_raises(Redlockc::ClosedError) { l.unlock }
    assert_raises(Redlockc::ClosedError) { c.lock("x") }
    l2 = lock(client, unique("closed2"))
    l2.close
    assert_raises(Redlockc::ClosedError) { l2.try_lock }
  end

  def test_fenced_set_refuses_a_smaller_token
    c = client
    token = 5
    key = unique("fenced-res")
    assert_equal true, c.fenced_set(key, "newer\0bin", token + 1)
    assert_equal true, c.fenced_set(key, "again", token + 1)
    assert_equal false, c.fenced_set(key, "late", token)
    assert_raises(Redlockc::InvalidArgumentError) { c.fenced_set(key, "x", 0) }
  end
end
require_relative "test_family" # the lock family
require_relative "test_fencing" # the fencing option
require_relative "test_cancel" # cancel from another thread
