//! Windows facts (filled in below).
