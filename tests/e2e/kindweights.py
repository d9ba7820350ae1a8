"""Where the kind tier's model weights come from: a claim filled with a tiny model, and a file
server pod serving it over HTTPS (and plain HTTP) under a private CA.

Nothing here is pulled: the claim is filled and the files are served from the llama-server member
image, which carries the two tiny models (``/models/tiny-1.gguf``, ``/models/tiny-2.gguf``), and
the server is the project's own test file server (:mod:`controlplane.envtest.fileserver`, in the
image with the rest of the package), so it answers byte ranges and ``HEAD`` as the fetcher expects.

* **The claim.** The node image has no dynamic provisioner (docs/kind.md: kind's legacy host-path
  StorageClass, which nothing serves), so the claim is bound statically: a ``hostPath``
  PersistentVolume on the node, pre-bound to the claim by ``claimRef``/``volumeName`` with
  ``storageClassName: ""`` (so the default class is never asked). A one-shot pod of the member
  image mounts it and copies the model in, as root (the kubelet creates the folder as root).
* **The file server.** A pod and a Service ``files``: HTTPS on 443 with a certificate for the
  Service's names signed by a CA made here, plain HTTP on 80 (an ``http://`` source needs
  ``sha256``; the digest tests use it).
* **Trusting the CA.** The CA is a ConfigMap named by the member's ``spec.model.caBundle``: the
  operator mounts it into the fetch container only and points ``SSL_CERT_FILE`` at it.
"""

from __future__ import annotations

import base64
import contextlib
from dataclasses import dataclass
from typing import Final

from controlplane.envtest.pki import CertificateAuthority
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import CONFIGMAPS, PODS, SECRETS, SERVICES, Resource
from tests.e2e.clusters import TestCluster
from tests.e2e.incluster import ROLLOUT_TIMEOUT
from tests.e2e.kubectl import kubectl
from tests.e2e.waiting import eventually

PERSISTENT_VOLUMES: Final = Resource(
    "", "v1", "persistentvolumes", "PersistentVolume", namespaced=False
)
PERSISTENT_VOLUME_CLAIMS: Final = Resource(
    "", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"
)

#: The models the llama-server member image carries.
IMAGE_MODELS: Final = "/models"
#: The claim, and where the model is inside it (a folder: the source names a path in the claim).
CLAIM: Final = "weights"
PATH_IN_CLAIM: Final = "models/tiny-1.gguf"
#: The node folder behind the claim's PersistentVolume (one per namespace).
PV_ROOT: Final = "/var/lib/modelpool-e2e"
#: The file server's pod and Service, and the file it serves for the fetched members.
FILES: Final = "files"
SERVED: Final = "tiny-2.gguf"
HTTPS_PORT: Final = 8443
HTTP_PORT: Final = 8080
#: The CA bundle's name in the node cache entry, and so in the fetch container.
CA_CONFIG_MAP: Final = "files-ca"

#: The file server: HTTPS with the Secret's pair and plain HTTP, both over ``/models``.
SERVE: Final = """
import sys, threading
from pathlib import Path
from controlplane.envtest.fileserver import FileServer
root, tls = Path(sys.argv[1]), (Path("/tls/tls.crt"), Path("/tls/tls.key"))
FileServer(root, tls=tls, host="0.0.0.0", port=int(sys.argv[2])).start()
FileServer(root, host="0.0.0.0", port=int(sys.argv[3])).start()
print("serving", root, flush=True)
threading.Event().wait()
"""


def pv_name(namespace: str) -> str:
    return f"{namespace}-weights"


async def pod_phase(admin: KubeClient, namespace: str, name: str) -> str:
    pod = await admin.get(PODS, name, namespace)
    return str((pod.get("status") or {}).get("phase") or "")


async def filled_claim(admin: KubeClient, cluster: TestCluster, namespace: str) -> str:
    """The claim :data:`CLAIM` bound to a node folder and holding the tiny model at
    :data:`PATH_IN_CLAIM`; returns the ``pvc://`` source naming it. The PersistentVolume is
    cluster-scoped: :func:`remove_volume` deletes it."""
    assert cluster.llama_image is not None
    volume = pv_name(namespace)
    size = {"storage": "64Mi"}
    await admin.create(
        PERSISTENT_VOLUMES,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": size,
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": f"{PV_ROOT}/{namespace}", "type": "DirectoryOrCreate"},
                "claimRef": {"namespace": namespace, "name": CLAIM},
            },
        },
    )
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM},
        "spec": {
            "storageClassName": "",
            "volumeName": volume,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": size},
        },
    }
    await admin.create(PERSISTENT_VOLUME_CLAIMS, claim, namespace)
    folder = PATH_IN_CLAIM.rsplit("/", 1)[0]
    copy = (
        f"mkdir -p /claim/{folder} && cp {IMAGE_MODELS}/tiny-1.gguf /claim/{PATH_IN_CLAIM} "
        f"&& chmod 0644 /claim/{PATH_IN_CLAIM}"
    )
    filler = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "fill-weights"},
        "spec": {
            "restartPolicy": "Never",
            # The kubelet creates the volume's folder as root; the image's user is not.
            "securityContext": {"runAsUser": 0, "runAsNonRoot": False},
            "containers": [
                {
                    "name": "copy",
                    "image": cluster.llama_image,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", copy],
                    "volumeMounts": [{"name": "claim", "mountPath": "/claim"}],
                }
            ],
            "volumes": [{"name": "claim", "persistentVolumeClaim": {"claimName": CLAIM}}],
        },
    }
    await admin.create(PODS, filler, namespace)

    async def copied() -> bool:
        phase = await pod_phase(admin, namespace, "fill-weights")
        assert phase != "Failed", "the pod filling the claim failed"
        return phase == "Succeeded"

    await eventually(copied, timeout=ROLLOUT_TIMEOUT, interval=0.5, what="the claim filled")
    return f"pvc://{CLAIM}/{PATH_IN_CLAIM}"


async def remove_volume(admin: KubeClient, namespace: str) -> None:
    with contextlib.suppress(NotFound):
        await admin.delete(PERSISTENT_VOLUMES, pv_name(namespace))


@dataclass(frozen=True)
class FileServerUrls:
    """Where the in-cluster file server serves :data:`SERVED`, and the file's digest."""

    https: str
    http: str
    sha256: str
    ca_pem: bytes


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def file_server(admin: KubeClient, cluster: TestCluster, namespace: str) -> FileServerUrls:
    """The file server pod and Service :data:`FILES`, ready; its URLs of :data:`SERVED`."""
    assert cluster.llama_image is not None
    host = f"{FILES}.{namespace}.svc"
    authority = CertificateAuthority("modelpool-e2e-files-ca")
    pair = authority.serving_pair((host, f"{host}.cluster.local"))
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{FILES}-tls"},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": _b64(pair.cert_pem), "tls.key": _b64(pair.key_pem)},
    }
    await admin.create(SECRETS, secret, namespace)
    labels = {"app.kubernetes.io/name": FILES}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": FILES, "labels": labels},
        "spec": {
            "containers": [
                {
                    "name": "serve",
                    "image": cluster.llama_image,
                    "imagePullPolicy": "Never",
                    "command": [
                        "python",
                        "-c",
                        SERVE,
                        IMAGE_MODELS,
                        str(HTTPS_PORT),
                        str(HTTP_PORT),
                    ],
                    "ports": [
                        {"name": "https", "containerPort": HTTPS_PORT},
                        {"name": "http", "containerPort": HTTP_PORT},
                    ],
                    "readinessProbe": {
                        "tcpSocket": {"port": HTTP_PORT},
                        "periodSeconds": 1,
                    },
                    "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": True}],
                }
            ],
            "volumes": [{"name": "tls", "secret": {"secretName": f"{FILES}-tls"}}],
        },
    }
    await admin.create(PODS, pod, namespace)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": FILES},
        "spec": {
            "selector": labels,
            "ports": [
                {"name": "https", "port": 443, "targetPort": "https"},
                {"name": "http", "port": 80, "targetPort": "http"},
            ],
        },
    }
    await admin.create(SERVICES, service, namespace)

    async def ready() -> bool:
        found = await admin.get(PODS, FILES, namespace)
        statuses = (found.get("status") or {}).get("containerStatuses") or ()
        return any(status.get("ready") for status in statuses)

    await eventually(ready, timeout=ROLLOUT_TIMEOUT, interval=0.5, what="the file server ready")
    _, out, _ = await kubectl(
        cluster, "-n", namespace, "exec", FILES, "--", "sha256sum", f"{IMAGE_MODELS}/{SERVED}"
    )
    digest = out.split()[0]
    return FileServerUrls(
        f"https://{host}/{SERVED}", f"http://{host}/{SERVED}", digest, authority.cert_pem
    )


async def ca_config_map(admin: KubeClient, namespace: str, ca_pem: bytes) -> str:
    """The file server's CA as a ConfigMap (key ``ca.crt``), for ``spec.model.caBundle``."""
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CA_CONFIG_MAP},
            "data": {"ca.crt": ca_pem.decode()}}  # fmt: skip
    await admin.create(CONFIGMAPS, body, namespace)
    return CA_CONFIG_MAP


async def copied_into_claim(
    admin: KubeClient, cluster: TestCluster, namespace: str, image_file: str, path_in_claim: str
) -> str:
    """One more of the image's models (``image_file`` under :data:`IMAGE_MODELS`) copied into
    the claim :func:`filled_claim` made, at ``path_in_claim``; returns its ``pvc://`` source.

    Why a second pod and not a second file in the first: a pool of several members reads
    several files of one claim (a slot server mounts the claim once per member), which is the
    shape worth testing, while :func:`filled_claim`'s callers keep the one model they expect."""
    assert cluster.llama_image is not None
    stem = image_file.removesuffix(".gguf").replace(".", "-").replace("_", "-").lower()
    name = f"fill-{stem}"
    folder = path_in_claim.rsplit("/", 1)[0] if "/" in path_in_claim else "."
    copy = (
        f"mkdir -p /claim/{folder} && cp {IMAGE_MODELS}/{image_file} /claim/{path_in_claim} "
        f"&& chmod 0644 /claim/{path_in_claim}"
    )
    filler = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsUser": 0, "runAsNonRoot": False},
            "containers": [
                {
                    "name": "copy",
                    "image": cluster.llama_image,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", copy],
                    "volumeMounts": [{"name": "claim", "mountPath": "/claim"}],
                }
            ],
            "volumes": [{"name": "claim", "persistentVolumeClaim": {"claimName": CLAIM}}],
        },
    }
    await admin.create(PODS, filler, namespace)

    async def copied() -> bool:
        phase = await pod_phase(admin, namespace, name)
        assert phase != "Failed", f"the pod copying {image_file} into the claim failed"
        return phase == "Succeeded"

    await eventually(copied, timeout=ROLLOUT_TIMEOUT, interval=0.5, what=f"{image_file} copied")
    return f"pvc://{CLAIM}/{path_in_claim}"
