"""How much slower than on a quiet machine a test's timed step may be before the test calls it wrong.

A test asserts behaviour, not speed (speed is measured in bench/). Where behaviour is told apart by time (an answer
that did not wait for a retry, a deadline that cut a hung tool off), the bound is the code's own setting divided or
multiplied by HEADROOM: CI's two cores, busy with other work (load 5-20), took 1.6x as long as a quiet machine on
the slowest step seen (a restart that recorded in 27 s where 17 s was the bound)."""

HEADROOM = 3
