"""The collector HTTP server's default bounds (``httpserver``): a light module, so that the
command line reads them without importing ``http.server``."""

#: Connections served at once, and how long one may stay idle (per read or write).
MAX_CONNECTIONS = 64
IDLE_TIMEOUT_S = 10.0
