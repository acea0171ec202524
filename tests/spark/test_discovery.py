"""Spark's discovery of the ``s3stream`` format after ``pip install`` and after ``pip install -e``.

Spark registers the ``DefaultSource`` of every top-level ``pyspark_*`` module that ``pkgutil.iter_modules``
lists (``pyspark.sql.worker.lookup_data_sources``). A copy of the project is installed into a temporary
directory both ways, and pyspark's own lookup runs in a subprocess that sees only that install (``-S``:
none of this environment's ``.pth`` files, so not its editable install of the checkout). No JVM needed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

ROOT = Path(__file__).resolve().parents[2]

_LOOKUP = r"""
import io, json, site, sys
site.addsitedir(sys.argv[1])  # the install's .pth files run, as in site-packages
sys.path.append(sys.argv[2])  # pyspark and the dependencies, without that directory's .pth files
from pyspark.serializers import UTF8Deserializer, read_int
from pyspark.worker_util import pickleSer
from pyspark.sql.worker.lookup_data_sources import _main

out = io.BytesIO()
_main(io.BytesIO(), out)
out.seek(0)
found = {}
for _ in range(read_int(out)):
    name = UTF8Deserializer().loads(out)
    source = pickleSer._read_with_length(out)
    found[name] = sys.modules[source.__module__].__file__
print(json.dumps(found))
"""


@pytest.mark.parametrize("editable", [False, True], ids=["wheel", "editable"])
def test_spark_discovers_the_installed_source(tmp_path: Path, editable: bool) -> None:
    import pyspark

    src, target = tmp_path / "src", tmp_path / "site"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("s3stream", "wal", "cleaner", "pyspark_s3stream"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
               "--target", str(target), *(["-e"] if editable else []), str(src)]
    built = subprocess.run(install, capture_output=True, text=True, timeout=180, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    site_dir = str(Path(pyspark.__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-S", "-c", _LOOKUP, str(target), site_dir], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert "s3stream" in found
    assert Path(found["s3stream"]).is_relative_to(src if editable else target)
