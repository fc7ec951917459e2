package dev.wirelint.example.blog;

import dev.wirelint.junit5.Wirelint;
import dev.wirelint.junit5.WirelintTest;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.testcontainers.junit.jupiter.Container;
import org.testcontainers.junit.jupiter.Testcontainers;
import org.testcontainers.mongodb.MongoDBContainer;

/**
 * The front page against a MongoDB container that the test starts itself,
 * through wirelint: {@code Wirelint.uri(upstream)} starts the run's wirelint
 * in front of the container and returns the URI Spring connects to. No
 * {@code wirelint.upstream}.
 *
 * <p>Needs a Docker engine (without one, the class is skipped): not part of
 * the suite run with {@code -Dwirelint.upstream}; run alone with
 * {@code mvn test -Pcontainers}. What wirelint should find is what
 * {@link FrontPageTest} says: WL401 on {@code blog.authors} with the
 * default {@code blog.authors=per-row}, which fails the run; nothing with
 * {@code -Dblog.authors=batched}.
 */
@Testcontainers(disabledWithoutDocker = true)
@WirelintTest
@SpringBootTest
class ContainerFrontPageTest {
  @Container static final MongoDBContainer mongo = new MongoDBContainer("mongo:7.0");

  @DynamicPropertySource
  static void mongo(DynamicPropertyRegistry registry) {
    registry.add("spring.mongodb.uri", () -> Wirelint.uri(mongo.getReplicaSetUrl()));
  }

  @Autowired Blog blog;
  @Autowired FrontPage frontPage;

  @Test
  void the_front_page_names_every_author() {
    FrontPageTest.namesEveryAuthor(blog, frontPage);
  }
}
