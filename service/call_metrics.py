"""The call budgets' figures on the Prometheus endpoint, read at scrape time.

Invariant: tenant labels come only from the tokens file; the same ``CallFigures`` GetLoad shows.
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .budgets import ANONYMOUS_STREAMS, PRIORITY, RPCS, TENANT_STREAMS


class CallCollector:
    def __init__(self, budgets):
        self.budgets = budgets

    def describe(self):
        return []

    def collect(self):
        f = self.budgets.figures()
        yield _gauge("mlxgrpc_open_rpcs", "RPCs counted against --max-concurrent-rpcs (all but health checks "
                                          "and anonymous streams)", f.open_rpcs)
        yield _gauge("mlxgrpc_max_concurrent_rpcs", "The server's --max-concurrent-rpcs (0: none)", f.max_rpcs)
        yield _gauge("mlxgrpc_anonymous_streams", "Streaming calls open by callers without a token",
                     f.anonymous_streams)
        yield _gauge("mlxgrpc_max_anonymous_streams", "The server's --max-anonymous-streams (0: none)",
                     f.max_anonymous_streams)
        open_ = GaugeMetricFamily("mlxgrpc_tenant_open_streams", "A tenant's streaming calls open",
                                  labels=["tenant"])
        limit = GaugeMetricFamily("mlxgrpc_tenant_max_streams", "A tenant's limit on streaming calls open (0: none)",
                                  labels=["tenant"])
        priority = GaugeMetricFamily("mlxgrpc_tenant_max_priority", "The highest priority a tenant's requests may "
                                                                    "carry", labels=["tenant"])
        refused = CounterMetricFamily("mlxgrpc_refused_calls", "Calls refused by a call limit: rpcs "
                                      "(--max-concurrent-rpcs), anonymous_streams, tenant_streams (max_streams), "
                                      "priority (max_priority)", labels=["limit", "tenant"])
        refused.add_metric([RPCS, ""], f.refused_rpcs)
        refused.add_metric([ANONYMOUS_STREAMS, ""], f.refused_anonymous_streams)
        for t in f.tenants:
            open_.add_metric([t.tenant], t.open_streams)
            limit.add_metric([t.tenant], t.max_streams)
            priority.add_metric([t.tenant], t.max_priority)
            refused.add_metric([TENANT_STREAMS, t.tenant], t.refused_streams)
            refused.add_metric([PRIORITY, t.tenant], t.refused_priorities)
        yield from (open_, limit, priority, refused)


def _gauge(name: str, help_: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_, value=value)
