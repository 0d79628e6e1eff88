"""thread_client: a multithreaded daemon that pushes requests through the API keys of a
rate-limited exchange as fast as the limits allow, without tripping them or losing one."""

from .config import Config
from .daemon import Daemon
from .rate_limiter import ThreadSafeRateLimiter

__all__ = ["Config", "Daemon", "ThreadSafeRateLimiter"]
__version__ = "0.1.0"
