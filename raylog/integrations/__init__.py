"""raylog for the engines that run on Ray: Ray Data (``ray_data``) and Spark on Ray
(``spark``). Each is a layer above the clients: it reads and writes through them."""
