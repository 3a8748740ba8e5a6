# frozen_string_literal: true

# The client option fencing, on a redis-server of each test's own (started
# here on a free loopback port, stopped by its pid), so that every key on it
# can be counted: off by default, a released lock leaves no key and
# #fencing_token raises InvalidArgumentError naming the option; with
# fencing: true each hold has a token from the counter
# redisson_lock_token:{name}, the one key per name that stays.
require "fileutils"
require "minitest/autorun"
require "socket"
require "tmpdir"
require "redlockc"

class RedlockcFencingTest < Minitest::Test
  NAMES = %w[orders accounts jobs:7].freeze

  def setup
    @dir = Dir.mktmpdir("rlc-ruby-fencing-")
    @port, @pid = start_server
  end

  def teardown
    if @pid
      Process.kill(:KILL, @pid)
      Process.wait(@pid)
    end
    FileUtils.remove_entry(@dir)
  end

  # A redis-server on a free port, answering PING within 10 s: [port, pid].
  def start_server
    5.times do
      port = @port = TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }
      pid = Process.spawn("redis-server", "--port", port.to_s, "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "no", "--dir", @dir,
                          out: File::NULL, err: File::NULL)
      200.times do # 10 s
        break if Process.wait(pid, Process::WNOHANG) # lost the port race: the next one
        return [port, pid] if (command("PING") rescue nil) == "+PONG"
        sleep 0.05
      end
      begin
        Process.kill(:KILL, pid)
        Process.wait(pid)
      rescue Errno::ESRCH, Errno::ECHILD
        nil # it had exited
      end
    end
    flunk "no redis-server started"
  end

  # One inline command to the test's server: its reply, as a list of lines
  # for an array reply (KEYS), else the reply line.
  def command(*words)
    TCPSocket.open("127.0.0.1", @port) do |s|
      s.write("#{words.join(' ')}\r\n")
      line = s.gets.to_s.chomp
      return line unless line.start_with?("*")
      Array.new(line[1..].to_i) { s.gets && s.gets.to_s.chomp }
    end
  end

  def cycle(client)
    NAMES.each do |name|
      l = client.lock(name)
      assert l.try_lock(timeout: 5), "#{name} acquired"
      yield l, name
      l.unlock
      l.close
    end
    client.close
  end

  def test_by_default_no_key_is_left_and_there_is_no_token
    cycle(Redlockc::Client.new("redis://127.0.0.1:#{@port}")) do |l, name|
      err = assert_raises(Redlockc::InvalidArgumentError) { l.fencing_token }
      assert_match(/fencing is off/, err.message)
      assert_match(/fencing=1/, err.message, "the message names the option")
      assert_includes err.message, "'#{name}'", "and the lock"
    end
    assert_equal [], command("KEYS", "*"), "keys left after release"
  end

  def test_with_fencing_one_counter_key_per_name_stays
    cycle(Redlockc::Client.new("redis://127.0.0.1:#{@port}", fencing: true)) do |l, _name|
      assert_operator l.fencing_token, :>, 0
    end
    assert_equal NAMES.map { |n| "redisson_lock_token:{#{n}}" }.sort, command("KEYS", "*").sort
  end
end
