package dev.wirelint.junit5;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** What WirelintContainer asks Docker for; running it needs a Docker engine (tests/junit.rs does). */
class WirelintContainerTest {
  @Test
  void the_default_image_is_this_version() {
    assertTrue(WirelintContainer.DEFAULT_IMAGE.matches("wirelint:\\d+\\.\\d+\\.\\d+.*"), WirelintContainer.DEFAULT_IMAGE);
  }

  @Test
  void it_runs_on_the_host_network_in_front_of_the_upstream_on_loopback_ports() {
    WirelintContainer c = new WirelintContainer("registry.example.com/wirelint:dev").withUpstream("mongodb://u:p@127.0.0.1:27017/blog?tls=true&w=1");
    c.configure();
    assertEquals("host", c.getNetworkMode());
    Map<String, String> env = c.getEnvMap();
    String listen = env.get("WIRELINT_LISTEN");
    String admin = env.get("WIRELINT_ADMIN");
    assertTrue(listen.matches("127\\.0\\.0\\.1:\\d+"), listen);
    assertTrue(admin.matches("127\\.0\\.0\\.1:\\d+"), admin);
    assertNotEquals(listen, admin);
    assertEquals(
        List.of(
            "proxy",
            "--upstream",
            "mongodb://u:p@127.0.0.1:27017/blog?tls=true&w=1",
            "--report",
            WirelintContainer.REPORT_IN_CONTAINER,
            "--report-interval",
            "5s"),
        List.of(c.getCommandParts()));
    assertEquals("mongodb://u:p@" + listen + "/blog?w=1", c.getConnectionString());
    assertEquals(listen, c.getAddress());
    assertEquals(admin, c.getAdminAddress());
  }

  @Test
  void an_upstream_is_needed_and_asked_for_at_start() {
    IllegalStateException e = assertThrows(IllegalStateException.class, () -> new WirelintContainer().configure());
    assertEquals("wirelint: WirelintContainer needs an upstream: withUpstream(uri)", e.getMessage());
    String[] uri = {"mongodb://127.0.0.1:1/"};
    WirelintContainer c = new WirelintContainer("registry.example.com/wirelint:dev").withUpstream(() -> uri[0]);
    uri[0] = "mongodb://127.0.0.1:2/";
    c.configure();
    assertEquals("mongodb://127.0.0.1:2/", c.getUpstream());
    assertThrows(IllegalArgumentException.class, () -> new WirelintContainer("registry.example.com/wirelint:dev").withUpstream("postgres://x/").configure());
  }

  @Test
  void nothing_to_connect_to_before_it_starts() {
    IllegalStateException e =
        assertThrows(IllegalStateException.class, () -> new WirelintContainer().withUpstream("mongodb://a/").getConnectionString());
    assertEquals("wirelint: the WirelintContainer has not been started", e.getMessage());
  }
}
