# frozen_string_literal: true

# The Ruby side of the cross-runtime counter (the critical section is
# described in counter.c), through Lock#synchronize.
#   ruby counter.rb URI LOCK DIR ITERATIONS LABEL READY
require "redlockc"

# Returns true when someone else was inside.
def critical(dir, label)
  inside = File.join(dir, "inside")
  marker = begin
    File.open(inside, File::WRONLY | File::CREAT | File::EXCL)
  rescue Errno::EEXIST
    nil
  end
  counter = File.join(dir, "counter")
  value = File.exist?(counter) ? File.read(counter).to_i : 0
  sleep 0.001
  tmp = File.join(dir, "counter.#{label}")
  File.write(tmp, "#{value + 1}\n")
  File.rename(tmp, counter)
  if marker
    marker.close
    File.unlink(inside)
  end
  marker.nil?
end

uri, name, dir, iterations, label, ready = ARGV
client = Redlockc::Client.new(uri)
lock = client.lock(name)
overlaps = 0
errors = 0
File.write(ready, "ready #{label}\n", mode: "a")
Integer(iterations).times do |i|
  lock.synchronize(timeout: 60) { overlaps += 1 if critical(dir, label) }
rescue Redlockc::Error => e
  warn "#{label}: iteration #{i}: #{e.class}: #{e.message}"
  errors += 1
end
lock.close
client.close
puts "#{label} iterations=#{iterations} overlaps=#{overlaps} errors=#{errors}"
exit(overlaps.zero? && errors.zero? ? 0 : 1)
