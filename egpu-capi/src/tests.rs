//! Unit tests of the ABI's behaviour on bad arguments.
