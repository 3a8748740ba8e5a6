package redlockc

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import "unsafe"

// FencedSet writes value at key only if token (Lock.FencingToken) is at
// least the fence stored with it in "redlockc_fence:{key}", so a holder
// whose lock expired while it was paused cannot overwrite what a later
// holder wrote. It reports whether the value was written (false: a larger
// token is stored; nothing was written). The client must have one node: the
// Redis that holds the resource. It runs on the library's blocking API (one round
// trip on this goroutine's thread); Close waits for a call in progress.
func (c *Client) FencedSet(key string, value []byte, token uint64) (bool, error) {
	if token == 0 {
		return false, errorf(StatusInvalid, "fenced set", "token must be >= 1")
	}
	ckey := C.CString(key)
	defer C.free(unsafe.Pointer(ckey))
	var p unsafe.Pointer
	if len(value) > 0 {
		p = C.CBytes(value)
		defer C.free(p)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	blk, err := c.blocking("fenced set")
	if err != nil {
		return false, err
	}
	r := C.rlcgo_fenced_set(blk, ckey, p, C.size_t(len(value)), C.uint64_t(token))
	if err := check("fenced set", r); err != nil {
		return false, err
	}
	return r.value != 0, nil
}
