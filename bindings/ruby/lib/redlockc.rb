# frozen_string_literal: true

# redlockc for Ruby: Redisson-compatible distributed locks and Redlock over
# libredlockc.so.1, through Fiddle (Ruby's standard FFI; nothing to compile).
#
#   require "redlockc"
#   client = Redlockc::Client.new("redis://127.0.0.1:6379")
#   client.lock("orders").synchronize { ... }
#
# libredlockc.so.1 is found through REDLOCKC_LIBRARY, pkg-config, the
# loader's path or the standard directories (see Redlockc::Native).
module Redlockc
end

require_relative "redlockc/errors"
require_relative "redlockc/native"
require_relative "redlockc/client"
require_relative "redlockc/lock"
require_relative "redlockc/family"

module Redlockc
  VERSION = Native.plain(:rlc_version).to_s
end
