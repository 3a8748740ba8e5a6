# frozen_string_literal: true

# #cancel from another thread against a real redis-server (RLC_TEST_REDIS,
# started by tests/runtimes/run.sh): for every kind, a thread waits 30 s on a
# held lock or a busy semaphore, the main thread cancels, the waiter raises
# CanceledError well before its wait ends, and nothing of it is left in Redis.
require "minitest/autorun"
require "socket"
require "uri"
require "redlockc"

class RedlockcCancelTest < Minitest::Test
  WAIT = 30   # seconds the waiter would wait without a cancel
  BOUND = 5   # seconds the cancel may take to end it (a try on the wire ends first)

  def setup
    @uri = ENV["RLC_TEST_REDIS"] or flunk "RLC_TEST_REDIS is not set: run tests/runtimes/run.sh"
    @clients = []
  end

  def teardown
    @clients.each(&:close)
  end

  def client
    Redlockc::Client.new(@uri).tap { |c| @clients << c }
  end

  def unique(what)
    "ruby-c-#{what}-#{Process.pid}-#{Process.clock_gettime(Process::CLOCK_REALTIME, :nanosecond)}"
  end

  # One command to the test server, by hand: the reply as an Array of lines
  # (an integer's digits, a bulk string, or an array's elements).
  def redis(*args)
    uri = URI(@uri.split(",").first)
    TCPSocket.open(uri.host, uri.port) do |s|
      s.write("*#{args.size}\r\n" + args.map { |a| "$#{a.bytesize}\r\n#{a}\r\n" }.join)
      read_reply(s)
    end
  end

  def read_reply(sock)
    line = sock.gets.to_s.chomp
    case line[0]
    when "*" then Array.new([line[1..].to_i, 0].max) { read_reply(sock) }.flatten
    when "$" then (n = line[1..].to_i).negative? ? [] : [sock.read(n + 2)[0, n]]
    else [line[1..]]
    end
  end

  # Runs the block (a wait of WAIT s) in a thread and calls cancel until it
  # ends: a cancel made before the thread's acquire starts does not reach it,
  # so it is repeated (every 20 ms, at most BOUND s). Returns what the thread
  # raised, nil if nothing.
  def cancel_wait(cancel, &wait)
    waiter = Thread.new do
      wait.call
      nil
    rescue Exception => e # rubocop:disable Lint/RescueException -- handed to the test
      e
    end
    waiter.report_on_exception = false
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + BOUND
    while waiter.alive? && Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
      cancel.call
      waiter.join(0.02)
    end
    ended = waiter.join(WAIT + 5) # let it end either way before asserting
    assert ended && !waiter.alive?, "the waiter must end"
    raised = waiter.value
    assert_kind_of Redlockc::CanceledError, raised,
                   "a cancelled wait raises CanceledError within #{BOUND} s (raised #{raised.inspect})"
    assert_equal(-12, raised.status)
    raised
  end

  def field(client, owner) = "#{client.uuid}:#{owner}"

  def test_lock_wait_is_cancelled_and_keeps_nothing
    c = client
    name = unique("lock")
    holder = c.lock(name)
    waiter = c.lock(name)
    assert holder.try_lock(lease: WAIT)
    cancel_wait(-> { waiter.cancel }) { waiter.try_lock(timeout: WAIT) }
    assert_equal [field(c, holder.owner)], redis("HKEYS", name), "only the holder's field"
    refute waiter.owned?
    holder.unlock
    assert waiter.try_lock(timeout: 5), "the object still acquires after a cancel"
    waiter.unlock
  ensure
    [holder, waiter].compact.each(&:close)
  end

  # A fiber of another thread waiting for the object's local monitor (the
  # object's own holder is in the way, not Redis) is cancelled too.
  def test_lock_wait_for_the_local_monitor_is_cancelled
    c = client
    l = c.lock(unique("local"))
    assert l.try_lock(lease: WAIT)
    cancel_wait(-> { l.cancel }) { l.try_lock(timeout: WAIT) }
    assert_equal 1, l.hold_count, "the holder's level is left as it was"
    l.unlock
  ensure
    l&.close
  end

  def test_rwlock_waits_of_both_sides_are_cancelled
    c = client
    name = unique("rw")
    holder = c.rwlock(name)
    waiter = c.rwlock(name)
    assert holder.write_lock.try_lock(lease: WAIT)
    cancel_wait(-> { waiter.cancel }) { waiter.read_lock.try_lock(timeout: WAIT) }
    cancel_wait(-> { waiter.write_lock.cancel }) { waiter.write_lock.try_lock(timeout: WAIT) }
    keys = redis("HKEYS", name)
    assert_empty keys.grep(/\A#{Regexp.escape(field(c, waiter.owner))}(:|\z)/), "no field of the waiter in #{keys}"
    assert_equal :write, waiter.mode
    holder.write_lock.unlock
    assert waiter.read_lock.try_lock(timeout: 5)
    waiter.read_lock.unlock
  ensure
    [holder, waiter].compact.each(&:close)
  end

  def test_fair_waiter_is_cancelled_and_leaves_the_queue
    c = client
    name = unique("fair")
    holder = c.fair_lock(name)
    waiter = c.fair_lock(name)
    assert holder.try_lock(lease: WAIT)
    cancel_wait(-> { waiter.cancel }) { waiter.try_lock(timeout: WAIT) }
    mine = field(c, waiter.owner)
    refute_includes redis("LRANGE", "redisson_lock_queue:{#{name}}", "0", "-1"), mine, "queue entry"
    refute_includes redis("ZRANGE", "redisson_lock_timeout:{#{name}}", "0", "-1"), mine, "timeout entry"
    assert_equal [field(c, holder.owner)], redis("HKEYS", name)
    holder.unlock
    assert waiter.try_lock(timeout: 5)
    waiter.unlock
  ensure
    [holder, waiter].compact.each(&:close)
  end

  def test_semaphore_wait_is_cancelled_and_the_count_is_back
    c = client
    name = unique("sem")
    holder = c.semaphore(name, 2)
    waiter = c.semaphore(name)
    assert holder.try_acquire(1)
    cancel_wait(-> { waiter.cancel }) { waiter.try_acquire(2, timeout: WAIT) }
    assert_equal 1, waiter.available_permits, "the free permit stays free"
    holder.release(1)
    assert_equal 2, waiter.available_permits
  ensure
    [holder, waiter].compact.each(&:close)
  end

  def test_permit_semaphore_wait_is_cancelled_and_the_count_is_back
    c = client
    name = unique("psem")
    holder = c.permit_semaphore(name, 2)
    waiter = c.permit_semaphore(name)
    id = holder.try_acquire(1, lease: WAIT)
    assert id
    cancel_wait(-> { waiter.cancel }) { waiter.try_acquire(2, timeout: WAIT, lease: WAIT) }
    assert_equal 1, waiter.available_permits, "the free permit stays free"
    assert_equal 1, redis("ZCARD", "{#{name}}:timeout").first.to_i, "only the holder's permit is taken"
    holder.release(id)
    assert_equal 2, waiter.available_permits
  ensure
    [holder, waiter].compact.each(&:close)
  end

  def test_multi_lock_wait_is_cancelled_and_takes_no_name
    c = client
    free = unique("m1")
    busy = unique("m2")
    blocker = c.lock(busy)
    assert blocker.try_lock(lease: WAIT)
    m = c.multi_lock([free, busy])
    cancel_wait(-> { m.cancel }) { m.try_lock(timeout: WAIT) }
    assert_equal "0", redis("EXISTS", free).first, "no hold of the free name"
    assert_equal [field(c, blocker.owner)], redis("HKEYS", busy)
    blocker.unlock
    assert m.try_lock(timeout: 5)
    m.unlock
  ensure
    [blocker, m].compact.each(&:close)
  end
end
