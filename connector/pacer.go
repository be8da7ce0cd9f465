package connector

import (
	"math"
	"time"
)

// Pacer paces a source reader at a rate: record number n is due (n-base)/rate seconds after the pacer's
// clock started, the record at base at once. A reader asks Due in PollNext and emits the records below
// it; when none is due it calls Wait and returns runnel.NothingAvailable, and Available wakes the task
// when the next record is due. The clock starts at the first Due, so a reader created long before its
// first poll does not catch up, and Restart starts it again (after a restore, the rate holds from the
// restart on). A Pacer belongs to one reader: it is not safe for concurrent use. Close stops its timer.
type Pacer struct {
	rate  float64 // records per second; 0 or less is unpaced
	base  uint64  // the record number at which the clock started
	start time.Time
	timer *time.Timer
	wake  chan struct{}
}

// NewPacer returns a pacer at rate records per second whose first due record is base. A rate of 0 or
// less paces nothing: every record is due.
func NewPacer(rate float64, base uint64) *Pacer { return &Pacer{rate: rate, base: base} }

// Due returns the first record number not due yet, or math.MaxUint64 when unpaced.
func (p *Pacer) Due() uint64 {
	if p.rate <= 0 {
		return math.MaxUint64
	}
	if p.start.IsZero() {
		p.start = time.Now()
	}
	return p.base + uint64(time.Since(p.start).Seconds()*p.rate) + 1
}

// Wait makes Available ready when record next is due (at once if it is due already).
func (p *Pacer) Wait(next uint64) {
	var d time.Duration
	if due := p.Due(); due <= next {
		d = time.Duration(float64(next-due+1) / p.rate * float64(time.Second))
	}
	if p.wake == nil {
		p.wake = make(chan struct{}, 1)
	}
	if p.timer == nil {
		p.timer = time.AfterFunc(d, func() {
			select {
			case p.wake <- struct{}{}:
			default:
			}
		})
		return
	}
	p.timer.Reset(d)
}

// Restart starts the clock again at record base, at the next Due.
func (p *Pacer) Restart(base uint64) { p.base, p.start = base, time.Time{} }

// Available is the reader's Available channel: nil until the first Wait, then ready once per Wait that
// has run out.
func (p *Pacer) Available() <-chan struct{} { return p.wake }

// Close stops the timer of a pending Wait.
func (p *Pacer) Close() {
	if p.timer != nil {
		p.timer.Stop()
	}
}
