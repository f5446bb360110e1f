"""Iceberg's REST Compatibility Kit (tests/rck): built once with javac, run against a gateway.

The kit's Java sources are compiled against the Iceberg runtime jar the Spark tests use and
pyspark's Hadoop and logging jars, plus JUnit 5 and AssertJ from Debian (`junit5`,
`libassertj-core-java`, installed by scripts/install-test-deps.sh). The classes are cached under
tests/rck/.build/<digest>, where the digest covers the sources, the class path and the compiler
version, so a change to any of them rebuilds and nothing stale is ever run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyspark

from tests.support.engines import iceberg_spark_runtime_jar

RCK_DIR = Path(__file__).resolve().parents[1] / "rck"
SOURCES = RCK_DIR / "src"
BUILD_DIR = RCK_DIR / ".build"
JUNIT_CONSOLE = Path("/usr/share/java/junit-platform-console-standalone.jar")
ASSERTJ = Path("/usr/share/java/assertj-core.jar")
TEST_CLASSES = (
    "org.apache.iceberg.rest.RESTCompatibilityKitCatalogTests",
    "org.apache.iceberg.rest.RESTCompatibilityKitViewCatalogTests",
)
# What the kit needs from pyspark's jars besides the Iceberg runtime (rck/README.md upstream).
PYSPARK_JARS = (
    "hadoop-client-api-3.3.4",
    "hadoop-client-runtime-3.3.4",
    "slf4j-api-2.0.7",
    "log4j-slf4j2-impl-2.20.0",
    "log4j-api-2.20.0",
    "log4j-core-2.20.0",
    "kryo-shaded-4.0.2",
    "minlog-1.3.0",
    "objenesis-3.3",
    "jcl-over-slf4j-2.0.7",
)
BUILD_TIMEOUT = 300
RUN_TIMEOUT = 600


def library_class_path() -> list[Path]:
    pyspark_jars = Path(pyspark.__file__).parent / "jars"
    jars = [iceberg_spark_runtime_jar(), *(pyspark_jars / f"{name}.jar" for name in PYSPARK_JARS), ASSERTJ]
    missing = [str(jar) for jar in [*jars, JUNIT_CONSOLE] if not jar.is_file()]
    if missing:
        raise RuntimeError(f"the kit needs {missing} (make test installs them: scripts/install-test-deps.sh)")
    return jars


def _digest(sources: list[Path], class_path: list[Path], root: Path) -> str:
    javac = subprocess.run(["javac", "-version"], capture_output=True, text=True, check=True)
    digest = hashlib.sha256((javac.stdout + javac.stderr).encode())
    for path in [*class_path, JUNIT_CONSOLE]:
        digest.update(str(path).encode())
    for source in sources:
        digest.update(str(source.relative_to(root)).encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def build(root: Path = SOURCES, build_dir: Path = BUILD_DIR) -> Path:
    """The compiled kit's class directory, compiled now unless this exact build is cached. Other
    Java drivers of Iceberg's client (tests/delegation) are built the same way from their own
    `root` into their own `build_dir`."""
    class_path = library_class_path()
    sources = sorted(root.rglob("*.java"))
    target = build_dir / _digest(sources, class_path, root)
    classes = target / "classes"
    if (target / "complete").is_file():
        return classes
    shutil.rmtree(build_dir, ignore_errors=True)  # older builds: nothing else uses them
    classes.mkdir(parents=True)
    subprocess.run(
        [
            "javac",
            "-nowarn",
            "-encoding",
            "UTF-8",
            "-cp",
            os.pathsep.join(str(p) for p in [*class_path, JUNIT_CONSOLE]),
            "-d",
            str(classes),
            *(str(s) for s in sources),
        ],
        check=True,
        capture_output=True,
        timeout=BUILD_TIMEOUT,
    )
    (target / "complete").touch()
    return classes


@dataclass(frozen=True)
class KitResult:
    """The outcome of one kit run: test display names by outcome, and the console output."""

    passed: frozenset[str]
    failed: dict[str, str]  # name -> first line of the failure
    aborted: frozenset[str]
    output: str

    @property
    def total(self) -> int:
        return len(self.passed) + len(self.failed) + len(self.aborted)


@dataclass(frozen=True)
class KitTarget:
    """Where the kit runs: the catalog, its warehouse and an OAuth2 client of the gateway."""

    uri: str
    warehouse: str
    client_id: str
    client_secret: str
    base_location: str  # where tests ask for explicit table locations
    temp_dir: Path  # JUnit's @TempDir (view locations): inside the warehouse


def run(
    classes: Path,
    target: KitTarget,
    reports: Path,
    flags: Mapping[str, str],
    java_options: Sequence[str] = (),
) -> KitResult:
    """Run the kit's catalog and view suites against `target`; `flags` are its `rck.*` switches,
    `java_options` e.g. the truststore that trusts the gateway's certificate."""
    target.temp_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "CATALOG_URI": target.uri,
        "CATALOG_WAREHOUSE": target.warehouse,
        "CATALOG_CREDENTIAL": f"{target.client_id}:{target.client_secret}",
        "CATALOG_OAUTH2__SERVER__URI": f"{target.uri}/v1/oauth/tokens",
    }
    properties = {"rck.local": "false", "rck.base-table-location": target.base_location, **flags}
    class_path = os.pathsep.join(str(p) for p in [classes, *library_class_path()])
    command = [
        "java",
        "-Xmx1g",
        *java_options,
        f"-Djava.io.tmpdir={target.temp_dir}",
        *(f"-D{key}={value}" for key, value in properties.items()),
        "-jar",
        str(JUNIT_CONSOLE),
        "--disable-banner",
        "--details=summary",
        "-cp",
        class_path,
        *(f"--select-class={name}" for name in TEST_CLASSES),
        f"--reports-dir={reports}",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    return _parse_reports(reports, done.stdout + done.stderr)


def _parse_reports(reports: Path, output: str) -> KitResult:
    passed: set[str] = set()
    failed: dict[str, str] = {}
    aborted: set[str] = set()
    for report in reports.glob("*.xml"):
        for case in ET.parse(report).getroot().iter("testcase"):
            name = f"{case.get('classname', '').rsplit('.', 1)[-1]}.{case.get('name')}"
            problem = case.find("failure")
            if problem is None:
                problem = case.find("error")
            if case.find("skipped") is not None:
                aborted.add(name)
            elif problem is not None:
                lines = (problem.get("message") or problem.text or "").strip().splitlines()
                failed[name] = lines[0][:300] if lines else "(no message)"
            else:
                passed.add(name)
    return KitResult(frozenset(passed), failed, frozenset(aborted), output)
