"""raylog for the engines that run on Ray: Ray Data (``ray_data``) and Spark on Ray
(``spark``). Each is a layer above the clients: it reads and writes through them."""

# raylog.init is how an integration's clients given no cluster connect, as for the clients
# the raylog package hands out (see raylog/session.py).
import raylog.session  # noqa: F401
