"""The sources a ``MonitorConfig`` names, built once when the daemon starts."""

from __future__ import annotations

import logging

import httpx
from prometheus_client import CollectorRegistry

from monitor.config import MonitorConfig
from monitor.sources.base import Source
from monitor.sources.dmon import DmonCommandSource, DmonFileSource
from monitor.sources.file_sd import FileSDSource
from monitor.sources.nvml import NvmlSampler, NvmlSource
from monitor.sources.prom_api import PromQuerySource
from monitor.sources.ray_state import RayStateSource
from monitor.sources.reward_outliers import RewardOutlierSource
from monitor.sources.scrape import ScrapeSource
from monitor.sources.tail_state import OffsetStore
from monitor.sources.verl_export import VerlSeriesExport
from monitor.sources.verl_log import VerlLogSource

log = logging.getLogger("monitor.sources")


def build_sources(config: MonitorConfig, client: httpx.AsyncClient, registry: CollectorRegistry,
                  outliers: bool) -> list[Source]:
    """``client``: shared by the HTTP sources (its pool sized for the targets). ``registry``: where a
    re-exported verl log's series are collected. ``outliers``: a rule needs the trainers' prompts."""
    sources: list[Source] = [ScrapeSource(t, client) for t in config.targets]
    sources += [FileSDSource(sd, client, i) for i, sd in enumerate(config.file_sd)]
    if config.ray is not None:
        sources.append(RayStateSource(config.ray, client))
    if outliers:
        sources.append(RewardOutlierSource(config.targets, config.target_tokens, client))
    if config.prometheus:
        sources.append(PromQuerySource(config.prometheus))
    if config.jsonl:  # read offsets survive restarts, next to the alert states
        offsets = OffsetStore(config.state_db.with_name("jsonl-offsets.json"))
        export = None
        if any(j.export for j in config.jsonl):
            export = VerlSeriesExport()
            registry.register(export)
        sources += [VerlLogSource(j, offsets, export if j.export else None) for j in config.jsonl]
    for i, dm in enumerate(config.dmon):
        sources.append(DmonCommandSource(dm.command, dm.node, i) if dm.command
                       else DmonFileSource(dm.path or "", dm.node, i))
    if config.nvml:
        if NvmlSampler.available():
            sources.append(NvmlSource(config.nvml_interval))
        else:
            log.info("nvml: no GPU visible; local NVML sampling off")
    return sources
