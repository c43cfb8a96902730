"""The HA scenarios run only when asked for by marker (`-m chaos`: `make ha`, `make chaos`)."""
