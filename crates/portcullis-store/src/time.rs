//! How the store writes a point in time: whole milliseconds since the Unix
//! epoch in a 64-bit integer column, which both SQL dialects index and
//! compare natively.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch; negative before it, saturating at the
/// ends of `i64` (hundreds of millions of years away).
pub(crate) fn to_millis(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_millis())
            .map(|ms| -ms)
            .unwrap_or(i64::MIN),
    }
}

/// The time `to_millis` wrote.
pub(crate) fn from_millis(millis: i64) -> SystemTime {
    let magnitude = Duration::from_millis(millis.unsigned_abs());
    if millis >= 0 {
        UNIX_EPOCH + magnitude
    } else {
        UNIX_EPOCH - magnitude
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_at_millisecond_precision() {
        for ms in [0, 1, 1_764_500_000_123, -86_400_000] {
            assert_eq!(to_millis(from_millis(ms)), ms);
        }
        let precise = UNIX_EPOCH + Duration::from_nanos(1_500_000_999);
        assert_eq!(to_millis(precise), 1_500);
    }
}
