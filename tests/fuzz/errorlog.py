"""Every ERROR a server logs while the fuzzers run: an exception that escaped the app shows here.

uvicorn catches what an ASGI app raises, answers 500 (or closes) and logs "Exception in ASGI
application" at ERROR on ``uvicorn.error``; asyncio logs a task's unretrieved exception on its
own logger. uvicorn's logging configuration gives its loggers handlers of their own that do not
propagate, so the handler is put on them as well as on the root, after the servers configured
logging.
"""

from __future__ import annotations

import logging
import threading

#: The loggers whose records do not all reach the root once uvicorn has configured logging.
WATCHED = ("", "uvicorn", "uvicorn.error", "asyncio")


class ErrorLog(logging.Handler):
    """Collects ERROR records (from any thread), formatted with their tracebacks."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self._lock_records = threading.Lock()
        self._records: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock_records:
            self._records.append(self.format(record))

    def take(self) -> list[str]:
        """The records since the last take."""
        with self._lock_records:
            records, self._records = self._records, []
        return records

    def install(self) -> None:
        for name in WATCHED:
            logger = logging.getLogger(name)
            if self not in logger.handlers:
                logger.addHandler(self)

    def remove(self) -> None:
        for name in WATCHED:
            logging.getLogger(name).removeHandler(self)
