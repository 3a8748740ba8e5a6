# frozen_string_literal: true

require "fiddle"

module Redlockc
  # The C ABI of libredlockc.so.1, declared with Fiddle. Fiddle releases the
  # GVL around every call (Fiddle::Function's need_gvl: false, the default),
  # so a thread waiting for a lock does not stop other Ruby threads, and one
  # of them can end that wait with rlc_*_cancel.
  #
  # rlc_errmsg() is per OS thread. A Ruby 3.1/3.2 Thread is one OS thread, so
  # reading it with the next call on the same Ruby thread (Native.call below)
  # reads the failing call's message. (Ruby 3.3's opt-in M:N threads,
  # RUBY_MN_THREADS=1, could move a thread between OS threads; not supported.)
  module Native
    SONAME = "libredlockc.so.1"
    # Tried after pkg-config and the loader's own search: where `cmake
    # --install` and Debian's libredlockc1 put the library.
    STANDARD_DIRS = ["/usr/local/lib", "/usr/lib/x86_64-linux-gnu"].freeze

    P = Fiddle::TYPE_VOIDP
    I = Fiddle::TYPE_INT
    I64 = Fiddle::TYPE_INT64_T
    U64 = -Fiddle::TYPE_INT64_T
    S = Fiddle::TYPE_CONST_STRING
    V = Fiddle::TYPE_VOID

    SIGNATURES = {
      rlc_version: [[], S],
      rlc_strerror: [[I], S],
      rlc_errmsg: [[], S],
      rlc_client_new: [[P, P, P], I],
      rlc_client_free: [[P], V],
      rlc_client_uuid: [[P], S],
      rlc_lock_new: [[P, P, U64, P], I],
      rlc_lock_free: [[P], V],
      rlc_lock_acquire: [[P, I64, I64], I],
      rlc_lock_release: [[P], I],
      rlc_lock_extend: [[P, I64], I],
      rlc_lock_force_release: [[P], I],
      rlc_lock_is_locked: [[P, P], I],
      rlc_lock_is_held: [[P, P], I],
      rlc_lock_hold_count: [[P, P], I],
      rlc_lock_ttl_ms: [[P, P], I],
      rlc_lock_validity_ms: [[P, P], I],
      rlc_lock_fencing_token: [[P, P], I],
      rlc_client_metrics: [[P, P, I], I],
      rlc_metric_name: [[I], S],
      rlc_metric_bucket_ms: [[I], I64],
    }.freeze

    # Since REDLOCKC_1.1; looked up on first use, so an older library still loads.
    SIGNATURES_1_1 = {
      rlc_fenced_set: [[P, S, P, Fiddle::TYPE_SIZE_T, U64, P], I],
      rlc_lock_cancel: [[P], I],
    }.freeze

    # Since REDLOCKC_1.1 (the polled log), looked up the same way.
    SIGNATURES_1_2 = {
      rlc_client_keep_log: [[P, I], I],
      rlc_client_next_log: [[P, P, P, Fiddle::TYPE_SIZE_T], Fiddle::TYPE_SIZE_T],
    }.freeze

    # The library's libdir from pkg-config (nil without pkg-config or redlockc.pc).
    def self.pkg_config_libdir
      out = IO.popen(["pkg-config", "--variable=libdir", "redlockc"], err: File::NULL, &:read)
      dir = out.to_s.strip
      $?.success? && !dir.empty? ? dir : nil
    rescue SystemCallError
      nil # no pkg-config on PATH
    end

    # The paths to try, in order: REDLOCKC_LIBRARY alone when set; else
    # pkg-config's libdir, the dynamic loader's search (ld.so.cache,
    # LD_LIBRARY_PATH), then STANDARD_DIRS.
    def self.candidates
      explicit = ENV["REDLOCKC_LIBRARY"]
      return [explicit] if explicit && !explicit.empty?

      libdir = pkg_config_libdir
      from_pc = libdir ? [File.join(libdir, SONAME)] : []
      from_pc + [SONAME] + STANDARD_DIRS.map { |d| File.join(d, SONAME) }
    end

    def self.open_library
      errors = []
      candidates.each do |path|
        return [path, Fiddle.dlopen(path)]
      rescue Fiddle::DLError => e
        errors << e.message
      end
      raise LoadError, "redlockc: cannot load #{SONAME} (tried REDLOCKC_LIBRARY, pkg-config's " \
                       "libdir, the loader's search and #{STANDARD_DIRS.join(', ')}): #{errors.join('; ')}"
    end

    # The path the library was loaded from, for messages and tests.
    LIBRARY, handle = open_library

    FUNCTIONS = SIGNATURES.to_h do |name, (args, ret)|
      [name, Fiddle::Function.new(handle[name.to_s], args, ret)]
    end
    SIGNATURES_1_1.merge(SIGNATURES_1_2).each do |name, (args, ret)|
      FUNCTIONS[name] = Fiddle::Function.new(handle[name.to_s], args, ret)
    rescue Fiddle::DLError
      nil # an older libredlockc: calling it raises KeyError
    end
    FUNCTIONS.freeze

    module_function

    # Calls rlc_<name>; on a negative status raises the matching Error with
    # this thread's rlc_errmsg(), read right after the call.
    def call(name, *args)
      rc = FUNCTIONS.fetch(name).call(*args)
      raise Redlockc.error_for(rc, FUNCTIONS[:rlc_errmsg].call.to_s) if rc.negative?

      rc
    end

    def plain(name, *args)
      FUNCTIONS.fetch(name).call(*args)
    end

    # An 8-byte out-parameter, freed by the GC.
    def out8
      Fiddle::Pointer.malloc(8, Fiddle::RUBY_FREE)
    end

    def int64(ptr) = ptr[0, 8].unpack1("q")
    def uint64(ptr) = ptr[0, 8].unpack1("Q")
    def int32(ptr) = ptr[0, 4].unpack1("l")
    def pointer(ptr) = Fiddle::Pointer.new(ptr[0, 8].unpack1("J"))
  end
end
