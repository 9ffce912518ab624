package reentrant

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/petermattis/goid"
)

// Owner identifies who holds a Mutex: a goroutine (Self, a positive
// runtime id) or a token made by NewOwner (negative). The zero Owner is
// nobody.
type Owner int64

// Self returns the calling goroutine as an Owner.
func Self() Owner { return Owner(goid.Get()) }

var lastToken atomic.Int64

// NewOwner returns an owner that is no goroutine and differs from every
// other Owner of the process: any goroutine may act for it.
func NewOwner() Owner { return Owner(-lastToken.Add(1)) }

// Mode is how much of a Mutex a request takes.
type Mode int

const (
	Exclusive Mode = iota // the whole mutex (the zero value)
	Shared                // a share: any number at once, none beside Exclusive
	Weighted              // Request.Weight out of the mutex's size
)

// Request is what one acquisition asks for: how much of the mutex, and the
// caller's TTL, which the owner about to hand the mutex over reads with
// Next (the registry passes its hold on at the TTL the next owner asked
// for). The zero Request is exclusive, with no TTL.
type Request struct {
	Mode   Mode
	Weight int64 // Weighted only: 1 to the mutex's size
	TTL    time.Duration
}

// unbounded is the size of a Mutex made without NewWeighted: Shared takes 1
// of it, so no number of shared owners fills it.
const unbounded = math.MaxInt64 / 2
