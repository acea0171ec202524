"""The public home of s3stream's typed errors (``s3stream.base.errors.OffsetOutOfRange``, ...).

They are defined in :mod:`s3stream.base.errors`, the bottom layer every module may import; this module is
the stable name users import them by.
"""

from s3stream.base.errors import *  # noqa: F403
from s3stream.base.errors import __all__ as __all__
