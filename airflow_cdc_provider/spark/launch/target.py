"""Where spark-submit sends a job, and what a cluster-mode driver needs that spark-submit's launcher gives a
client-mode one."""

from __future__ import annotations

from dataclasses import dataclass

PYTHON_RUNNER = "org.apache.spark.deploy.PythonRunner"
# What spark-submit's launcher gives a client-mode driver on Java 17 but a standalone worker does not give
# a cluster-mode DriverWrapper: without them Arrow (Python data sources, foreachBatch) fails with
# "sun.misc.Unsafe or java.nio.DirectByteBuffer.<init>(long, int) not available".
DRIVER_JAVA_OPTIONS = " ".join([
    "-XX:+IgnoreUnrecognizedVMOptions", "--add-modules=jdk.incubator.vector",
    *(f"--add-opens=java.base/{m}=ALL-UNNAMED" for m in (
        "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio", "java.util",
        "java.util.concurrent", "java.util.concurrent.atomic", "jdk.internal.ref", "sun.nio.ch", "sun.nio.cs",
        "sun.security.action", "sun.util.calendar")),
    "-Djdk.reflect.useDirectMethodHandle=false", "-Dio.netty.tryReflectionSetAccessible=true",
])


@dataclass(frozen=True)
class SparkTarget:
    """Where spark-submit sends a job: the resolved master URL and deploy mode of the Spark connection."""

    master: str
    deploy_mode: str = "client"
    rest_url: str | None = None  # standalone cluster mode: the master's REST submission server

    @property
    def local(self) -> bool:
        return self.master.startswith("local")

    @property
    def cluster_mode(self) -> bool:
        return self.deploy_mode == "cluster"

    @property
    def standalone(self) -> bool:
        return self.master.startswith("spark://")
