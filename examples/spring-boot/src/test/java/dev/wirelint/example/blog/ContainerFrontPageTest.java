package dev.wirelint.example.blog;

import dev.wirelint.junit5.Wirelint;
import dev.wirelint.junit5.WirelintTest;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.testcontainers.containers.GenericContainer;
import org.testcontainers.containers.wait.strategy.Wait;
import org.testcontainers.junit.jupiter.Container;
import org.testcontainers.junit.jupiter.Testcontainers;
import org.testcontainers.utility.DockerImageName;

/**
 * The front page against a database container that the test starts itself,
 * with wirelint in a container of its own in front of it: FerretDB (the
 * image {@code wirelint-ferretdb:1.24.2}, built by the repository's
 * {@code scripts/image.sh}) on a free port of the host's network, and
 * {@code Wirelint.uri(upstream)}, which starts the run's wirelint in front
 * of it and returns the URI Spring connects to. The {@code containers}
 * profile sets {@code wirelint.container=true}, so that wirelint is a
 * {@code WirelintContainer} (the image {@code wirelint:VERSION}) rather
 * than a process. No {@code wirelint.upstream}.
 *
 * <p>Needs a Docker engine (without one, the class is skipped): not part of
 * the suite run with {@code -Dwirelint.upstream}; run alone with
 * {@code mvn test -Pcontainers}. What wirelint should find is what
 * {@link FrontPageTest} says: WL401 on {@code blog.authors} with the
 * default {@code blog.authors=per-row}, which fails the run and names this
 * test; nothing with {@code -Dblog.authors=batched}.
 */
@Testcontainers(disabledWithoutDocker = true)
@WirelintTest
@SpringBootTest
class ContainerFrontPageTest {
  /** FerretDB's port, on the host's loopback (the containers share the host's network). */
  static final int PORT = freePort();

  @Container
  static final GenericContainer<?> ferretdb =
      new GenericContainer<>(DockerImageName.parse("wirelint-ferretdb:1.24.2"))
          .withNetworkMode("host")
          .withEnv("FERRETDB_LISTEN_ADDR", "127.0.0.1:" + PORT)
          .waitingFor(Wait.forLogMessage("(?s).*Listening on TCP.*", 1));

  @DynamicPropertySource
  static void mongo(DynamicPropertyRegistry registry) {
    registry.add("spring.mongodb.uri", () -> Wirelint.uri("mongodb://127.0.0.1:" + PORT + "/"));
  }

  @Autowired Blog blog;
  @Autowired FrontPage frontPage;

  @Test
  void the_front_page_names_every_author() {
    FrontPageTest.namesEveryAuthor(blog, frontPage);
  }

  private static int freePort() {
    try (ServerSocket socket = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      return socket.getLocalPort();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
