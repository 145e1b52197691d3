"""What a sweep's valid points show along its axis: scaling across concurrency (concurrency), the length sweep's fits (lengths)."""
