"""What a point's load held: requests in flight and queue trends (inflight), the admission queue (admission), the engines it was spread over (engines)."""
