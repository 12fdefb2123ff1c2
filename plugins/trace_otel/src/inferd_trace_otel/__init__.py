"""OpenTelemetry export of inferd request traces (Triton's ``--trace-config mode=opentelemetry``)."""
