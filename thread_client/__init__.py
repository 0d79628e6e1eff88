"""thread_client: a multithreaded daemon that pushes requests through the API keys of a
rate-limited exchange as fast as the limits allow, without tripping them or losing one."""

__version__ = "0.2.0"  # set before the imports: the default User-Agent names it

from .config import Config
from .daemon import Daemon
from .limits.limiter import ThreadSafeRateLimiter
from .parts import Answer, Journal, KeyPool, RequestSource, ResultSink, Transport
from .policy.retry import RetryPolicy
from .request import FinalOutcome, Request

__all__ = [
    "Answer", "Config", "Daemon", "FinalOutcome", "Journal", "KeyPool", "Request", "RequestSource", "ResultSink",
    "RetryPolicy", "ThreadSafeRateLimiter", "Transport",
]
