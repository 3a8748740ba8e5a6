# frozen_string_literal: true

# The Ruby binding as a gem: pure Ruby over Fiddle (nothing to compile); it
# loads libredlockc.so.1 at run time, found through pkg-config or the standard paths.
#   gem build redlockc.gemspec && gem install --local ./redlockc-<version>.gem
Gem::Specification.new do |s|
  s.name = "redlockc"
  # The C library's version, CMakeLists.txt's project() VERSION (the gem is also
  # built from a copy of this directory: tests/packaging/metadata_check.py
  # compares the two).
  s.version = "1.1.0"
  s.summary = "Redisson-compatible distributed locks and Redlock on Redis, over libredlockc"
  s.description = <<~TEXT
    Reentrant locks in Redisson's data layout, kept alive by a watchdog, and
    the Redlock algorithm over N Redis masters, through Fiddle over the
    libredlockc C library (libredlockc.so.1 must be installed).
  TEXT
  s.authors = ["libredlockc authors"]
  s.license = "MIT"
  s.required_ruby_version = ">= 3.1"
  s.files = Dir["lib/**/*.rb"] + ["README.md", "LICENSE"]
  s.require_paths = ["lib"]
  s.requirements << "libredlockc.so.1 (libredlockc1, or cmake --install of libredlockc)"
end
