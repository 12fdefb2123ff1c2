"""What the dynamic and sequence batchers share: batch forming and queue policies."""
