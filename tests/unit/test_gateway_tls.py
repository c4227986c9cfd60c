"""TLS at the gateway (issue 23, item 1): the shipped haproxy.cfg.j2 with vllm_gateway_tls on, rendered with the
role's defaults, run by the real HAProxy (Debian's 2.6, OpenSSL 3) with a certificate this test makes (its
own CA, a server certificate for 127.0.0.1), in front of recording engines on 127.0.0.1.

A completion through https reaches the engine, with curl's way (a CA file) and the OpenAI SDK's; TLS 1.0 and
1.1 and ciphers outside the list are refused by the server; plain HTTP to the TLS port reaches no engine;
the redirect port answers 308 to https and reaches no engine either."""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import json
import shutil
import socket
import ssl
import subprocess

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gateway_harness import CLIENT_KEY, ENGINE_KEY, ROLE, backend_table, free_port, render_config, running_gateway

COMPLETION = json.dumps({"model": "tiny-a", "prompt": "hi", "max_tokens": 4}).encode()


def make_ca_and_server_cert(directory):
    """A CA and a server certificate for 127.0.0.1 / localhost signed by it: (ca.crt path, PEM bundle text),
    the bundle as tasks/main.yml writes it (certificate, then key)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test gateway CA")])
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                            crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
               .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "vllm-deploy gateway")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    ca_path = directory / "ca.crt"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    bundle = (cert.public_bytes(serialization.Encoding.PEM).decode()
              + key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()).decode())
    return ca_path, bundle


@pytest.fixture(scope="module")
def tls_gateway(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed (Debian: apt-get install openssl)")
    config_dir = tmp_path_factory.mktemp("gateway-tls")
    ca_path, bundle = make_ca_and_server_cert(config_dir)
    (config_dir / "tls").mkdir()
    (config_dir / "tls" / "gateway.pem").write_text(bundle)
    redirect_port = free_port()
    with running_gateway(config_dir, ["tiny-a"], vllm_gateway_tls=True,
                         vllm_gateway_http_redirect_port=redirect_port) as gw:
        yield {**gw, "ca": str(ca_path), "redirect_port": redirect_port}


def https(gw, body=COMPLETION, path="/v1/completions", key=CLIENT_KEY):
    context = ssl.create_default_context(cafile=gw["ca"])
    conn = http.client.HTTPSConnection("127.0.0.1", gw["port"], timeout=10, context=context)
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    answer = conn.getresponse()
    result = answer.status, answer.read(), conn.sock.version()
    conn.close()
    return result


def received(gw):
    return sum(len(e.received) for e in gw["engines"].values())


def s_client(gw, *args):
    """openssl s_client against the gateway with the test's CA: (exit status, its output)."""
    proc = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{gw['port']}", "-servername", "localhost",
                           "-CAfile", gw["ca"], *args], input="", capture_output=True, text=True, timeout=30)
    return proc.returncode, proc.stdout + proc.stderr


def test_a_completion_through_https_with_the_ca_reaches_the_engine(tls_gateway):
    before = received(tls_gateway)
    status, text, version = https(tls_gateway)
    assert status == 200, text
    assert json.loads(text)["choices"][0]["text"] == "hello from tiny-a"
    assert version in ("TLSv1.2", "TLSv1.3")
    assert received(tls_gateway) == before + 1
    request = tls_gateway["engines"]["tiny-a"].received[-1]
    assert request["body"] == COMPLETION and request["auth"] == f"Bearer {ENGINE_KEY}"
    # The gateway's own answers come through TLS too: a wrong key is refused there.
    assert https(tls_gateway, key="not-a-key-0123456789")[0] == 401


def test_a_client_without_the_ca_refuses_the_gateway(tls_gateway):
    conn = http.client.HTTPSConnection("127.0.0.1", tls_gateway["port"], timeout=10,
                                       context=ssl.create_default_context(cafile=None))
    with pytest.raises(ssl.SSLCertVerificationError):
        conn.request("GET", "/v1/models")
    conn.close()


def test_the_openai_sdk_works_through_https_with_the_ca(tls_gateway, monkeypatch):
    import openai

    base_url = f"https://127.0.0.1:{tls_gateway['port']}/v1"
    before = received(tls_gateway)
    # As the role's README tells a client: its own HTTP client trusting the CA ...
    http_client = openai.DefaultHttpxClient(verify=ssl.create_default_context(cafile=tls_gateway["ca"]))
    client = openai.OpenAI(base_url=base_url, api_key=CLIENT_KEY, http_client=http_client, max_retries=0)
    answer = client.completions.create(model="tiny-a", prompt="hi", max_tokens=4)
    assert answer.choices[0].text == "hello from tiny-a" and answer.model == "tiny-a"
    assert [m.id for m in client.models.list()] == ["tiny-a"]
    client.close()
    # ... or SSL_CERT_FILE pointing at it.
    monkeypatch.setenv("SSL_CERT_FILE", tls_gateway["ca"])
    with openai.OpenAI(base_url=base_url, api_key=CLIENT_KEY, max_retries=0) as client:
        assert client.completions.create(model="tiny-a", prompt="hi", max_tokens=4).choices[0].text == "hello from tiny-a"
    assert received(tls_gateway) == before + 2
    # Without the CA the SDK refuses to send the key.
    monkeypatch.delenv("SSL_CERT_FILE")
    with openai.OpenAI(base_url=base_url, api_key=CLIENT_KEY, max_retries=0) as client:
        with pytest.raises(openai.APIConnectionError):
            client.completions.create(model="tiny-a", prompt="hi", max_tokens=4)
    assert received(tls_gateway) == before + 2


def negotiated(output):
    """(version, cipher) of the session s_client reports, or None when the handshake failed."""
    line = next((line for line in output.splitlines() if line.startswith("New, ")), "")
    if not line or "Cipher is (NONE)" in line:
        return None
    version, _, cipher = line[len("New, "):].partition(", Cipher is ")
    return version, cipher.strip()


@pytest.mark.parametrize("version_flag", ["-tls1_1", "-tls1"])
def test_tls_1_0_and_1_1_cannot_negotiate(tls_gateway, version_flag):
    # SECLEVEL=0 lets the client offer the old version: the refusal is the server's alert 70.
    rc, output = s_client(tls_gateway, version_flag, "-cipher", "DEFAULT@SECLEVEL=0")
    assert rc != 0 and negotiated(output) is None, output
    assert "no protocols available" not in output, f"the client could not offer {version_flag}: {output}"
    assert "alert protocol version" in output, output


def test_tls_1_2_and_1_3_negotiate_with_the_modern_ciphers_only(tls_gateway):
    ciphers = render_defaults()["vllm_gateway_tls_ciphers"].split(":")
    rc, output = s_client(tls_gateway, "-tls1_2")
    assert rc == 0 and "Verify return code: 0 (ok)" in output, output
    version, cipher = negotiated(output)
    assert version == "TLSv1.2" and cipher in ciphers, output
    rc, output = s_client(tls_gateway, "-tls1_3")
    assert rc == 0 and "Verify return code: 0 (ok)" in output, output
    version, cipher = negotiated(output)
    assert version == "TLSv1.3" and cipher in render_defaults()["vllm_gateway_tls_ciphersuites"].split(":"), output
    # A TLS 1.2 client offering only CBC (no AEAD), or no forward secrecy (RSA key exchange), gets nothing.
    for weak in ("ECDHE-ECDSA-AES128-SHA", "AES128-GCM-SHA256"):
        rc, output = s_client(tls_gateway, "-tls1_2", "-cipher", weak)
        assert rc != 0 and negotiated(output) is None and "alert handshake failure" in output, (weak, output)


def test_plain_http_to_the_tls_port_reaches_no_engine(tls_gateway):
    before = received(tls_gateway)
    request = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {CLIENT_KEY}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(COMPLETION)}\r\n\r\n").encode() + COMPLETION
    with socket.create_connection(("127.0.0.1", tls_gateway["port"]), timeout=5) as sock:
        sock.sendall(request)
        answer = b""
        try:
            while chunk := sock.recv(4096):
                answer += chunk
        except ConnectionResetError:
            pass
    assert not answer.startswith(b"HTTP/"), answer[:200]
    assert received(tls_gateway) == before


def test_the_redirect_port_answers_308_to_https_and_forwards_nothing(tls_gateway):
    before = received(tls_gateway)
    port, redirect_port = tls_gateway["port"], tls_gateway["redirect_port"]
    for method, path, host, want in [
            ("POST", "/v1/completions?stream=1", f"127.0.0.1:{redirect_port}", f"https://127.0.0.1:{port}/v1/completions?stream=1"),
            ("GET", "/v1/models", "llm.example.internal", f"https://llm.example.internal:{port}/v1/models"),
            ("GET", "/metrics", f"[::1]:{redirect_port}", f"https://[::1]:{port}/metrics")]:
        conn = http.client.HTTPConnection("127.0.0.1", redirect_port, timeout=10)
        conn.request(method, path, body=COMPLETION if method == "POST" else None,
                     headers={"Host": host, "Authorization": f"Bearer {CLIENT_KEY}"})
        answer = conn.getresponse()
        answer.read()
        conn.close()
        assert (answer.status, answer.getheader("Location")) == (308, want), (method, path, host)
    assert received(tls_gateway) == before


def render_defaults():
    import yaml

    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def test_the_rendered_config_binds_tls_only_when_the_inventory_turns_it_on(tmp_path):
    table = backend_table([])
    plain = render_config(tmp_path, 8080, table)
    assert "    bind 127.0.0.1:8080\n" in plain and " ssl " not in plain and "vllm_http_redirect" not in plain
    tls = render_config(tmp_path, 8443, table, vllm_gateway_tls=True)
    bind = next(line for line in tls.splitlines() if line.strip().startswith("bind 127.0.0.1:8443"))
    assert bind.split()[2:] == ["ssl", "crt", f"{tmp_path}/tls/gateway.pem", "ssl-min-ver", "TLSv1.2",
                                "ciphers", render_defaults()["vllm_gateway_tls_ciphers"],
                                "ciphersuites", render_defaults()["vllm_gateway_tls_ciphersuites"], "alpn", "http/1.1"]
    # No redirect port: no plain-HTTP listener at all; one set without TLS is refused by the validation.
    assert "vllm_http_redirect" not in tls
    assert "vllm_http_redirect" not in render_config(tmp_path, 8080, table, vllm_gateway_http_redirect_port=8081)
    with_redirect = render_config(tmp_path, 443, table, vllm_gateway_tls=True, vllm_gateway_http_redirect_port=80)
    assert "bind 127.0.0.1:80\n" in with_redirect and "%[pathq] code 308" in with_redirect
    assert "regsub(:[0-9]+$,)]%[pathq]" in with_redirect  # port 443 is not written in the Location


def test_min_version_tls_1_3_refuses_tls_1_2(tmp_path):
    # HAProxy 2.6's own floor is TLS 1.2 already: this proves vllm_gateway_tls_min_version reaches the bind line.
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed (Debian: apt-get install openssl)")
    ca_path, bundle = make_ca_and_server_cert(tmp_path)
    (tmp_path / "tls").mkdir()
    (tmp_path / "tls" / "gateway.pem").write_text(bundle)
    with running_gateway(tmp_path, ["tiny-a"], vllm_gateway_tls=True, vllm_gateway_tls_min_version="TLSv1.3") as gw:
        gw = {**gw, "ca": str(ca_path)}
        rc, output = s_client(gw, "-tls1_2")
        assert rc != 0 and negotiated(output) is None and "alert protocol version" in output, output
        rc, output = s_client(gw, "-tls1_3")
        assert rc == 0 and negotiated(output)[0] == "TLSv1.3", output
        assert https(gw)[:1] == (200,) and https(gw)[2] == "TLSv1.3"


def test_loadgen_loads_a_tls_gateway_with_cacert(tls_gateway, capsys):
    import importlib.util

    from conftest import REPO

    spec = importlib.util.spec_from_file_location("loadgen", REPO / "scripts" / "loadgen.py")
    loadgen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loadgen)
    before = received(tls_gateway)
    common = ["--url", f"https://127.0.0.1:{tls_gateway['port']}", "--key", CLIENT_KEY, "--models", "tiny-a",
              "--requests", "4", "--concurrency", "2", "--max-tokens", "5", "--json"]
    assert loadgen.main([*common, "--cacert", tls_gateway["ca"]]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["complete"], result["stream"], result["non_stream"]) == (4, 2, 2), result
    assert received(tls_gateway) == before + 4
    # Without the CA nothing is sent: the certificate is refused before the key leaves.
    assert loadgen.main(common) == 1
    assert json.loads(capsys.readouterr().out)["outcomes"] == {"error_SSLCertVerificationError": 4}
    assert received(tls_gateway) == before + 4
