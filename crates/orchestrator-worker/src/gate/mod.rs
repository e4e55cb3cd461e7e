//! Placeholder: the gate runner lands here.
