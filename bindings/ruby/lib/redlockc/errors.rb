# frozen_string_literal: true

module Redlockc
  # Base of every failure; #status is the C status, #code its C name.
  class Error < StandardError
    attr_reader :status

    def initialize(message = nil, status: nil)
      super(message)
      @status = status || (self.class.const_defined?(:STATUS) ? self.class::STATUS : nil)
    end

    def code = STATUS_NAMES.fetch(@status, "RLC_#{@status}")
  end

  STATUS_NAMES = {
    0 => "RLC_OK", 1 => "RLC_NOT_ACQUIRED", -1 => "RLC_E_INVAL", -2 => "RLC_E_NOMEM",
    -3 => "RLC_E_CONNECT", -4 => "RLC_E_TIMEOUT", -5 => "RLC_E_NOT_OWNER", -6 => "RLC_E_LOST",
    -7 => "RLC_E_NO_QUORUM", -8 => "RLC_E_SERVER", -9 => "RLC_E_PROTOCOL", -10 => "RLC_E_CLOSED",
    -11 => "RLC_E_AUTH", -12 => "RLC_E_CANCELED"
  }.freeze

  # One class per status (RLC_NOT_ACQUIRED is not an error in C: #try_lock
  # returns false; #synchronize with a timeout raises NotAcquiredError).
  {
    NotAcquiredError: 1, InvalidArgumentError: -1, OutOfMemoryError: -2, ConnectionError: -3,
    TimeoutError: -4, NotOwnerError: -5, LockLostError: -6, NoQuorumError: -7, ServerError: -8,
    ProtocolError: -9, ClosedError: -10, AuthError: -11, CanceledError: -12
  }.each do |name, status|
    const_set(name, Class.new(Error)).const_set(:STATUS, status)
  end

  ERROR_CLASSES = constants.map { |c| const_get(c) }
                           .select { |c| c.is_a?(Class) && c < Error }
                           .to_h { |c| [c::STATUS, c] }.freeze

  # "lock lost: lock 'orders' was lost ..." from rlc_strerror + rlc_errmsg:
  # every error of this binding, the ones it raises itself included, has the
  # form docs/RUNTIMES.md promises: rlc_strerror(status) + ": " + detail.
  def self.error_for(status, detail)
    phrase = Native.plain(:rlc_strerror, status).to_s
    message = detail.nil? || detail.empty? ? phrase : "#{phrase}: #{detail}"
    ERROR_CLASSES.fetch(status, Error).new(message, status: status)
  end
end
