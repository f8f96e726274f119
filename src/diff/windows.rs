//! Windows diff (filled in below).
