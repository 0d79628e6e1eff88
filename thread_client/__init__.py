"""thread_client: a multithreaded daemon that pushes requests through the API keys of a
rate-limited exchange as fast as the limits allow, without tripping them or losing one."""

from .config import Config
from .daemon import Daemon
from .limits.keys import KeyPool
from .limits.limiter import ThreadSafeRateLimiter
from .policy.retry import RetryPolicy

__all__ = ["Config", "Daemon", "KeyPool", "RetryPolicy", "ThreadSafeRateLimiter"]
__version__ = "0.2.0"
