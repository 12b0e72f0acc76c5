# weft-test: labels=integration timeout=300
"""`cmake --install` into a scratch prefix puts the programs, the systemd unit, the example
configuration and the option reference where README's "Install as a service" says."""
import os
import subprocess
import tempfile

BUILD = os.environ.get("WEFT_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))


def test_cmake_install_layout():
    subprocess.run(["cmake", "--build", BUILD, "--target", "weftd", "weft-bench", "weftd_help"],
                   check=True, capture_output=True)
    with tempfile.TemporaryDirectory() as prefix:
        subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix], check=True, capture_output=True)
        for rel in ["bin/weftd", "bin/weft-bench"]:
            assert os.access(os.path.join(prefix, rel), os.X_OK), rel
        unit = open(os.path.join(prefix, "lib/systemd/system/weftd.service")).read()
        assert "Type=notify" in unit and "WatchdogSec=" in unit and "ExecReload=" in unit
        assert "example.invalid" not in unit and "Documentation=file:///usr/local/share/doc/weft/README.md" in unit
        doc = os.path.join(prefix, "share/doc/weft")
        assert "api_key_file" in open(os.path.join(doc, "weftd.example.json")).read()
        assert "## Install as a service" in open(os.path.join(doc, "README.md")).read()
        ref = open(os.path.join(doc, "weftd.txt")).read()
        assert ref.splitlines()[2].startswith("Usage: weftd ")
        assert "--write-timeout-ms" in ref and "--api-key-file" in ref
        # the installed program runs from its new home
        out = subprocess.run([os.path.join(prefix, "bin/weftd"), "--help"], check=True,
                             capture_output=True, text=True).stdout
        assert "--max-output-bytes" in out
