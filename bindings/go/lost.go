package redlockc

// #include "shim.h"
import "C"

import "sync"

// Lost notices: the library calls on_lost on its watchdog thread with the
// lock's id (a number: C may not keep Go pointers). The id finds the Lock's
// channel here; the send never blocks the watchdog, which renews every
// other lock of the client meanwhile. Only the channel is kept here, so a
// Lock value stays collectable.
var lostChannels sync.Map // uintptr -> chan error

//export rlcgoLost
func rlcgoLost(id C.uintptr_t, reason C.int) {
	v, ok := lostChannels.Load(uintptr(id))
	if !ok {
		return
	}
	err := &Error{Status: StatusLost, Op: "watchdog",
		Detail: "the hold could no longer be renewed: " + Status(reason).String()}
	select {
	case v.(chan error) <- err:
	default: // a notice is already waiting
	}
}
