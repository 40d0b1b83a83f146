//! Times as the command line and the MCP tools print them: the Root stores milliseconds since
//! the Unix epoch, and people (and models) read UTC calendar times.

/// Year, month, day, hour, minute, second (UTC) of milliseconds since the Unix epoch, in the
/// proleptic Gregorian calendar (Howard Hinnant's `civil_from_days`).
pub fn civil(ms: u64) -> (i64, i64, i64, u64, u64, u64) {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, rem / 3600, rem % 3600 / 60, rem % 60)
}

/// RFC 3339 (UTC, milliseconds) of milliseconds since the Unix epoch.
pub fn rfc3339(ms: u64) -> String {
    let (year, month, day, h, m, sec) = civil(ms);
    format!(
        "{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{sec:02}.{:03}Z",
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn calendar_times() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            super::rfc3339(1_796_422_248_007),
            "2026-12-04T22:10:48.007Z"
        );
        assert_eq!(super::civil(951_782_400_000), (2000, 2, 29, 0, 0, 0));
    }
}
