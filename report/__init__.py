"""Report builder: recompute every number from run bundles and render HTML and PDF."""
