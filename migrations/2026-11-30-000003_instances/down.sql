DROP TABLE placement_segments;
DROP TABLE instances;
