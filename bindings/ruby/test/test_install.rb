# frozen_string_literal: true

# The gem as a user installs it: `gem build` and `gem install --local` into a
# scratch GEM_HOME, then a fresh ruby that requires it with no
# REDLOCKC_LIBRARY and no LD_LIBRARY_PATH, the library's prefix known only
# through PKG_CONFIG_PATH (tests/runtimes/run.sh installs the library into a
# scratch prefix and exports PKG_CONFIG_PATH and RLC_TEST_REDIS).
require "minitest/autorun"
require "open3"
require "rbconfig"
require "tmpdir"

class InstallTest < Minitest::Test
  GEM_DIR = File.expand_path("..", __dir__)

  # Takes a lock through the installed gem and prints the loaded library's path.
  PROBE = <<~RUBY
    require "redlockc"
    client = Redlockc::Client.new(ENV.fetch("RLC_TEST_REDIS"))
    lock = client.lock("ruby-install-\#{Process.pid}")
    raise "no lock" unless lock.try_lock
    lock.unlock
    lock.close
    client.close
    puts Redlockc::Native::LIBRARY
  RUBY

  def setup
    @uri = ENV["RLC_TEST_REDIS"] or flunk "RLC_TEST_REDIS is not set: run tests/runtimes/run.sh"
    ENV["PKG_CONFIG_PATH"] or flunk "PKG_CONFIG_PATH is not set: run tests/runtimes/run.sh"
    @tmp = Dir.mktmpdir("rlc-gem-")
  end

  def teardown
    FileUtils.remove_entry(@tmp) if @tmp
  end

  def run!(env, *cmd, chdir: @tmp)
    out, status = Open3.capture2e(env, *cmd, chdir: chdir, unsetenv_others: false)
    assert status.success?, "#{cmd.join(' ')} failed:\n#{out}"
    out
  end

  def install_gem
    FileUtils.cp_r(Dir["#{GEM_DIR}/{lib,README.md,LICENSE,redlockc.gemspec}"], @tmp)
    gem = File.join(RbConfig::CONFIG["bindir"], "gem")
    run!({}, gem, "build", "redlockc.gemspec")
    built = Dir["#{@tmp}/redlockc-*.gem"].first or flunk "gem build made no .gem"
    run!({ "GEM_HOME" => "#{@tmp}/home" }, gem, "install", "--local", "--no-document", built)
  end

  def test_installed_gem_finds_the_library_through_pkg_config
    install_gem
    libdir = run!({}, "pkg-config", "--variable=libdir", "redlockc").strip
    env = { "GEM_HOME" => "#{@tmp}/home", "GEM_PATH" => "#{@tmp}/home",
            "REDLOCKC_LIBRARY" => nil, "LD_LIBRARY_PATH" => nil, "RUBYLIB" => nil, "RUBYOPT" => nil }
    # From a directory with no lib/ of ours: only the installed gem can answer.
    loaded = run!(env, RbConfig.ruby, "-e", PROBE, chdir: "/").lines.last.to_s.strip
    assert_equal File.join(libdir, "libredlockc.so.1"), loaded
  end
end
