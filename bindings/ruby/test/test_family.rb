# frozen_string_literal: true

# The lock family from Ruby against a real redis-server (RLC_TEST_REDIS,
# started by tests/runtimes/run.sh): read-write lock, fair lock, semaphores,
# multi-name lock.
require "minitest/autorun"
require "redlockc"

class RedlockcFamilyTest < Minitest::Test
  def setup
    @uri = ENV["RLC_TEST_REDIS"] or flunk "RLC_TEST_REDIS is not set: run tests/runtimes/run.sh"
    @clients = []
  end

  def teardown
    @clients.each(&:close)
  end

  def client(nodes = @uri)
    Redlockc::Client.new(nodes).tap { |c| @clients << c }
  end

  def unique(what)
    "ruby-f-#{what}-#{Process.pid}-#{Process.clock_gettime(Process::CLOCK_REALTIME, :nanosecond)}"
  end

  def test_readers_overlap_and_a_writer_is_alone
    c = client
    name = unique("rw")
    a = c.rwlock(name)
    b = c.rwlock(name)
    w = c.rwlock(name)
    assert a.read_lock.try_lock
    assert b.read_lock.try_lock, "two readers at once"
    assert_equal :read, a.mode
    refute w.write_lock.try_lock(timeout: 0.05), "a writer waits for the readers"
    a.read_lock.unlock
    b.read_lock.unlock
    w.write_lock.synchronize do
      assert_equal :write, w.mode
      refute a.read_lock.try_lock, "no reader while written"
      w.read_lock.synchronize { assert_equal 1, w.read_lock.hold_count } # the writer reads
      assert_operator w.write_lock.validity, :>, 0
    end
    assert_equal :free, w.mode
    assert_raises(Redlockc::NotOwnerError) { w.write_lock.unlock }
  end

  def test_threads_with_readers_and_writers_never_overlap_a_writer
    c = client
    name = unique("rwmix")
    mu = Mutex.new
    readers = writers = max_readers = violations = 0
    threads = Array.new(8) do |i|
      Thread.new do
        rw = c.rwlock(name)
        side = i % 4 == 0 ? rw.write_lock : rw.read_lock
        5.times do
          side.synchronize(timeout: 20) do
            mu.synchronize do
              side.write? ? writers += 1 : readers += 1
              max_readers = [max_readers, readers].max
              violations += 1 if writers > 1 || (writers.positive? && readers.positive?)
            end
            sleep 0.003
            mu.synchronize { side.write? ? writers -= 1 : readers -= 1 }
          end
        end
        rw.close
      end
    end
    threads.each { |t| assert t.join(60), "a thread still runs after 60 s" }
    assert_equal 0, violations
    assert_operator max_readers, :>, 1
  end

  def test_fair_lock_hands_off_in_arrival_order
    c = client
    name = unique("fair")
    holder = c.fair_lock(name)
    assert holder.try_lock(lease: 20)
    order = Queue.new
    threads = Array.new(4) do |i|
      t = Thread.new do
        l = c.fair_lock(name)
        l.synchronize(timeout: 20) { order << i }
        l.close
      end
      sleep 0.15 # each joins the queue before the next
      t
    end
    holder.unlock
    threads.each { |t| assert t.join(30) }
    assert_equal [0, 1, 2, 3], Array.new(4) { order.pop }
  end

  def test_semaphore_never_gives_out_more_than_its_permits
    c = client
    name = unique("sem")
    sem = c.semaphore(name, 2)
    refute sem.try_set_permits(5)
    assert_equal 2, sem.available_permits
    mu = Mutex.new
    inside = peak = 0
    threads = Array.new(5) do
      Thread.new do
        s = c.semaphore(name)
        4.times do
          s.synchronize(timeout: 20) do
            mu.synchronize { peak = [peak, inside += 1].max }
            sleep 0.002
            mu.synchronize { inside -= 1 }
          end
        end
      end
    end
    threads.each { |t| assert t.join(60) }
    assert_equal 2, peak
    refute sem.try_acquire(3, timeout: 0.05)
    assert_raises(Redlockc::InvalidArgumentError) { sem.try_acquire(0) }
  end

  def test_an_expired_permit_goes_back_and_its_release_is_lost
    c = client
    sem = c.permit_semaphore(unique("psem"), 1)
    id = sem.try_acquire(lease: 0.2)
    assert_match(/\A\h{32}\z/, id)
    assert_nil sem.try_acquire(lease: 1)
    back = false
    100.times do # 5 s at most
      break if (back = sem.available_permits == 1)

      sleep 0.05
    end
    assert back, "the permit came back"
    assert_raises(Redlockc::LockLostError) { sem.release(id) }
    assert_equal 1, sem.available_permits
  end

  def test_multi_lock_takes_all_or_none
    c = client
    n1 = unique("m1")
    n2 = unique("m2")
    blocker = c.lock(n2)
    assert blocker.try_lock(lease: 20)
    m = c.multi_lock([n1, n2, n1])
    assert_equal 2, m.size
    refute m.try_lock
    refute c.lock(n1).locked?, "no partial hold"
    blocker.unlock
    m.synchronize(timeout: 5) { assert c.lock(n1).locked? && c.lock(n2).locked? }
    refute c.lock(n1).locked?
    blocker.close
  end

  def test_refusals_over_several_masters_and_closed_handles
    many = client("#{@uri},redis://127.0.0.1:1,redis://127.0.0.1:2")
    assert_raises(Redlockc::InvalidArgumentError) { many.fair_lock("x") }
    assert_raises(Redlockc::InvalidArgumentError) { many.semaphore("x") }
    c = Redlockc::Client.new(@uri)
    rw = c.rwlock(unique("closed"))
    rw.close
    assert_raises(Redlockc::ClosedError) { rw.read_lock.try_lock }
    c.close
    assert_raises(Redlockc::ClosedError) { c.rwlock("y") }
  end
end
