"""The processes that play a pod's server container: a member's, a router-proxy's.

A member's server is the real llama.cpp ``llama-server`` when the stand-in has one and the
member's ``--model``, at its path on this machine (under a volume, the volume's folder:
:func:`~controlplane.standin.volumes.local_path`), is a GGUF file; a simulator otherwise. Either
gets the container's environment (:mod:`controlplane.standin.containerenv`) plus its identity
(:func:`~controlplane.standin.process.identity_env`). llama-server gets the container's
arguments rewritten to the pod's volumes and a loopback port of the stand-in's choosing
(:func:`~controlplane.standin.builders.llama_server_argv`); a simulator is told the served name,
slots and context read from them (:func:`~controlplane.standin.builders.server_args`). Either's
``--slot-save-path`` is the container path's folder here, made as a kubelet makes a
``DirectoryOrCreate`` hostPath. A router-proxy is ``controlplane router-proxy`` as the pod's
ServiceAccount (:mod:`controlplane.standin.tokens`), its arguments rewritten to the pod's volumes
(the API keys' Secret volume). A slot server is llama-server's router mode, real or simulated,
over its ``--models-dir`` laid out here (:mod:`controlplane.standin.slotserver`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

from controlplane.envtest.ports import free_port
from controlplane.runtime.client import KubeClient
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.endpoints import LOOPBACK
from controlplane.standin.builders import (
    MEMBER_LABEL,
    llama_server_argv,
    model_source,
    pod_env,
    proxy_argv,
    server_args,
    service_account_of,
    with_slot_save_path,
)
from controlplane.standin.logfiles import container_log_path
from controlplane.standin.process import (
    LlamaServerProcess,
    PodProcess,
    ProxyProcess,
    SimulatorProcess,
    SimulatorStartError,
    identity_env,
    is_gguf,
    simulator_argv,
)
from controlplane.standin.settings import NodeSettings
from controlplane.standin.slotserver import (
    SLOT_SERVER_LABEL,
    lay_out_models_dir,
    model_links,
    models_dir,
    real_router_argv,
    sim_router_argv,
    slot_server_env,
)
from controlplane.standin.tokens import service_account_token, write_token_kubeconfig
from controlplane.standin.volumes import Mount, local_path, rewrite_args

log = logging.getLogger(__name__)


class ServerLauncher:
    """Starts server processes for pods; each ``container`` given is the pod's server container
    with ``$(VAR)`` references in its arguments already expanded."""

    def __init__(self, settings: NodeSettings, client: KubeClient, config: ClientConfig) -> None:
        self.settings = settings
        self.client = client
        self.config = config

    def _log(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> Path:
        return container_log_path(self.settings.log_dir, pod, str(container.get("name")))

    def _folder(self, pod: Mapping[str, Any], mounts: Sequence[Mount], path: str) -> Path:
        """The local folder of the container's ``path``, made as a ``DirectoryOrCreate``
        hostPath is (and as a container's own folders exist in its image)."""
        meta = pod["metadata"]
        folder = local_path(mounts, path, self.settings.scratch(meta["namespace"], meta["name"]))
        assert folder is not None  # given a scratch folder, every path has a place
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    async def member(
        self,
        pod: Mapping[str, Any],
        container: Mapping[str, Any],
        mounts: Sequence[Mount],
        env: Mapping[str, str],
    ) -> PodProcess:
        """The real llama-server when the stand-in has one and the member's model is a GGUF
        file here; a simulator otherwise."""
        source = model_source(container)
        model = local_path(mounts, source) if source else None
        here = str(model) if model is not None else source
        binary = self.settings.llama_server
        if binary is not None and here and await anyio.to_thread.run_sync(is_gguf, here):
            return await self._llama_server(pod, container, mounts, env, binary)
        return await self._simulator(pod, container, mounts, env)

    def _member_env(self, pod: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, str]:
        meta = pod["metadata"]
        member = (meta.get("labels") or {}).get(MEMBER_LABEL, "")
        return {**env, **identity_env(meta["namespace"], meta["name"], member)}

    async def _llama_server(
        self,
        pod: Mapping[str, Any],
        container: Mapping[str, Any],
        mounts: Sequence[Mount],
        env: Mapping[str, str],
        binary: Path,
    ) -> PodProcess:
        meta = pod["metadata"]
        port = free_port(LOOPBACK)
        rewritten = {**container, "args": rewrite_args(container.get("args") or (), mounts)}
        argv = llama_server_argv(binary, rewritten, port=port)
        save_path = server_args(container, meta["name"]).slot_save_path
        if save_path:  # the pod's folder on this machine, as for a simulator
            argv = with_slot_save_path(argv, self._folder(pod, mounts, save_path))
        process = LlamaServerProcess(
            argv, self._log(pod, container), port, env=self._member_env(pod, env)
        )
        url = await process.start()
        log.info("pod %s/%s: llama-server for %s on %s", meta["namespace"], meta["name"],
                 model_source(rewritten), url)  # fmt: skip
        return process

    async def _simulator(
        self,
        pod: Mapping[str, Any],
        container: Mapping[str, Any],
        mounts: Sequence[Mount],
        env: Mapping[str, str],
    ) -> PodProcess:
        meta = pod["metadata"]
        args = server_args(container, meta["name"])
        load_seconds = args.load_seconds
        if load_seconds is None:
            load_seconds = self.settings.load_seconds
        save_path = None
        if args.slot_save_path:
            save_path = self._folder(pod, mounts, args.slot_save_path)
        argv = simulator_argv(
            args.model_name,
            host=LOOPBACK,
            load_seconds=load_seconds,
            token_seconds=self.settings.token_seconds,
            slots=args.slots,
            ctx_size=args.ctx_size,
            slot_save_path=save_path,
            slot_restore_delay=args.restore_delay_seconds,
            metrics=args.metrics,
        )
        process = SimulatorProcess(argv, self._log(pod, container), env=self._member_env(pod, env))
        try:
            url = await process.start()
        except SimulatorStartError as err:
            raise RuntimeError(f"pod {meta['namespace']}/{meta['name']}: simulator: {err}") from err
        log.info("pod %s/%s: simulator for %s on %s", meta["namespace"], meta["name"],
                 args.model_name, url)  # fmt: skip
        return process

    async def slot_server(
        self,
        pod: Mapping[str, Any],
        container: Mapping[str, Any],
        mounts: Sequence[Mount],
        env: Mapping[str, str],
    ) -> PodProcess:
        """llama-server in router mode over the pod's models, laid out in a folder of the pod's
        (one link per model mount); the real one when the stand-in has it and every model is a
        GGUF file here, else the simulator's router mode."""
        meta = pod["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        args = [str(a) for a in container.get("args") or ()]
        links = model_links(mounts, models_dir(args) or "/models")
        here = self.settings.scratch(namespace, name) / "models-dir"
        await anyio.to_thread.run_sync(lay_out_models_dir, here, links)
        rewritten = rewrite_args(args, mounts)
        port = free_port(LOOPBACK)
        binary = self.settings.llama_server
        targets = [str(target) for target in links.values()]
        real = binary is not None and all(
            [await anyio.to_thread.run_sync(is_gguf, target) for target in targets]
        )
        if binary is not None and real:
            argv = real_router_argv(binary, rewritten, here=here, port=port)
        else:
            argv = sim_router_argv(rewritten, here=here, port=port,
                                   load_seconds=self.settings.load_seconds,
                                   token_seconds=self.settings.token_seconds)  # fmt: skip
        pool = (meta.get("labels") or {}).get(SLOT_SERVER_LABEL, "")
        identity = slot_server_env(namespace, name, pool)
        process = LlamaServerProcess(argv, self._log(pod, container), port, env={**env, **identity})
        url = await process.start()
        log.info("pod %s/%s: %s router over %s on %s", namespace, name,
                 "llama-server" if real else "simulator", ", ".join(links), url)  # fmt: skip
        return process

    async def proxy(
        self,
        pod: Mapping[str, Any],
        container: Mapping[str, Any],
        mounts: Sequence[Mount],
        env: Mapping[str, str],
    ) -> PodProcess:
        """A router-proxy as the pod's ServiceAccount (a fresh token, as a kubelet mounts one),
        with its container's arguments (paths under a volume, such as ``--api-keys-dir``,
        pointed at the volume's folder), on a free loopback port."""
        container = {**container, "args": rewrite_args(container.get("args") or (), mounts)}
        meta = pod["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        account = service_account_of(pod)
        token = await service_account_token(self.client, namespace, account)
        folder = self.settings.log_dir / "router-proxies" / f"{namespace}_{name}"
        kubeconfig = write_token_kubeconfig(self.config, token, folder / "kubeconfig")
        port = free_port(LOOPBACK)
        argv = proxy_argv(
            container, pod, kubeconfig=kubeconfig, port=port, cache_dir=folder / "cache"
        )
        process = ProxyProcess(argv, self._log(pod, container), port, env={**env, **pod_env(pod)})
        url = await process.start()
        log.info("pod %s/%s: router-proxy as ServiceAccount %s/%s on %s",
                 namespace, name, namespace, account, url)  # fmt: skip
        return process
