package redlockc

// #include "shim.h"
import "C"

import "sync"

// Lost notices: the library calls on_lost on its callback thread with the
// lock's id (a number: C may not keep Go pointers), once per lost hold: a
// fixed lease that ran out, or a watchdog hold that could not be renewed.
// The id finds the Lock's channel here; the send never blocks that thread,
// which serves every other lock of the client. Only the channel is kept
// here, so a Lock value stays collectable.
var lostChannels sync.Map // uintptr -> chan error

//export rlcgoLost
func rlcgoLost(id C.uintptr_t, reason C.int) {
	v, ok := lostChannels.Load(uintptr(id))
	if !ok {
		return
	}
	detail := "its validity ran out (a fixed lease ended) or a renewal found it gone"
	if Status(reason) != StatusLost {
		detail = "renewals failed until its validity ran out: " + Status(reason).String()
	}
	err := &Error{Status: StatusLost, Op: "hold", Detail: detail}
	select {
	case v.(chan error) <- err:
	default: // a notice is already waiting
	}
}
