"""inferd response cache backed by Redis (``--cache-config redis,host=...``)."""
